//! Encodes one component-type section per combination of capabilities.
//!
//! `wasm-tools component new` reads the worlds a core module was built for from its
//! `component-type:*` custom sections and requires every export those worlds name.
//! `kstage_plugin::export!` therefore places exactly one of the sections written here
//! into the plugin: the `stage-plugin` world of kstage's WIT with only the listed
//! capabilities (plus `metadata`) left among its exports.

use std::fmt::Write as _;
use std::path::PathBuf;

use wit_component::StringEncoding;
use wit_parser::{Resolve, World, WorldItem, WorldKey};

/// (section name suffix, interfaces exported next to `metadata`)
const COMBINATIONS: &[(&str, &[&str])] = &[
    ("selector", &["selector"]),
    ("renderer", &["renderer"]),
    ("classifier", &["classifier"]),
    ("selector-renderer", &["selector", "renderer"]),
    ("selector-classifier", &["selector", "classifier"]),
    ("renderer-classifier", &["renderer", "classifier"]),
    (
        "selector-renderer-classifier",
        &["selector", "renderer", "classifier"],
    ),
];

fn main() {
    if let Err(e) = run() {
        panic!("kstage-plugin build script: {e:#}");
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let wit = manifest.join("../../../wit");
    println!("cargo:rerun-if-changed={}", wit.display());
    println!("cargo:rerun-if-changed=build.rs");

    let mut resolve = Resolve::default();
    let (pkg, _) = resolve
        .push_path(&wit)
        .map_err(|e| format!("reading {}: {e:#}", wit.display()))?;
    let full = resolve.select_world(&[pkg], Some("stage-plugin"))?;
    let version = resolve.packages[pkg]
        .name
        .version
        .as_ref()
        .ok_or("the kstage:plugin package has no version")?
        .to_string();
    println!("cargo:rustc-env=KSTAGE_PLUGIN_INTERFACE_VERSION={version}");

    // The interface name of each export of `stage-plugin`, checked against what the
    // SDK implements.
    let export_name = |resolve: &Resolve, key: &WorldKey| -> Option<String> {
        match key {
            WorldKey::Interface(id) => resolve.interfaces[*id].name.clone(),
            WorldKey::Name(n) => Some(n.clone()),
        }
    };
    let mut found: Vec<String> = resolve.worlds[full]
        .exports
        .keys()
        .filter_map(|k| export_name(&resolve, k))
        .collect();
    found.sort();
    if found != ["classifier", "metadata", "renderer", "selector"] {
        return Err(format!(
            "world stage-plugin exports {found:?}; this SDK implements metadata, selector, \
             renderer and classifier"
        )
        .into());
    }

    let mut rust = String::new();
    for (suffix, capabilities) in COMBINATIONS {
        let template = &resolve.worlds[full];
        let exports = template
            .exports
            .iter()
            .filter(|(key, item)| {
                matches!(item, WorldItem::Interface { .. })
                    && export_name(&resolve, key)
                        .is_some_and(|n| n == "metadata" || capabilities.contains(&n.as_str()))
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let world = World {
            name: format!("kstage-plugin-{suffix}"),
            exports,
            ..template.clone()
        };
        let id = resolve.worlds.alloc(world);
        let bytes =
            wit_component::metadata::encode(&resolve, id, StringEncoding::UTF8, None, false)?;
        let file = format!("{suffix}.bin");
        std::fs::write(out.join(&file), &bytes)?;
        let konst = suffix.to_uppercase().replace('-', "_");
        writeln!(
            rust,
            "pub const {konst}: [u8; {}] = *include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{file}\"));",
            bytes.len()
        )?;
    }
    std::fs::write(out.join("component_types.rs"), rust)?;
    Ok(())
}
