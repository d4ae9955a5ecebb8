//! Tells kstage's tests and benchmarks which external tools this machine has, so a test
//! that cannot run shows as `ignored` (with its reason) in `cargo test`'s own output
//! instead of passing without having run.
//!
//! It sets, for the test and bench targets:
//! - `cfg(kstage_kubectl)` when `kubectl` is on `PATH`;
//! - `cfg(kstage_registry)` when `docker-registry` (the CNCF distribution registry, which
//!   the OCI plugin tests start) is on `PATH`;
//! - `cfg(kstage_plugin = "NAME")` for each example component `NAME.wasm` that
//!   `plugins/build` has put into the plugin folder;
//! - `KSTAGE_PLUGIN_OUT` (compile-time env): that folder, `$KSTAGE_PLUGIN_OUT` or
//!   `<repo>/target/plugins`, the one place tests and benches look for components;
//! - `KSTAGE_KWOK_DIR` (compile-time env): KWOK's corpus, `$KSTAGE_KWOK_DIR` or
//!   `../shared/kwok` beside the repository, the one place tests and benches read it;
//! - `KSTAGE_TRANSCRIPTS` (compile-time env): a real kube-apiserver's recorded answers,
//!   `$KSTAGE_TRANSCRIPTS` or `../shared/kube-apiserver/transcripts`.
//!
//! CI asks for everything (`KSTAGE_REQUIRE_PLUGINS=1`, `KSTAGE_REQUIRE_KUBECTL=1`,
//! `KSTAGE_REQUIRE_REGISTRY=1`, or `CI` set for kubectl): then every cfg is set whatever the machine has, and a missing
//! tool fails its tests instead of skipping them.
//!
//! Re-run: `plugins/build` rewrites `<plugin folder>/.stamp` after every build, and this
//! script watches that file (creating the folder and an empty stamp when missing, so
//! cargo has an existing file to compare and does not re-run this script, and rebuild
//! kstage, on every `cargo test`). A component copied in by hand is noticed after the
//! next `plugins/build` (or `touch <plugin folder>/.stamp`).

use std::path::{Path, PathBuf};

/// The components `plugins/build` makes, one per example (and the WASI probe).
const COMPONENTS: [&str; 7] = [
    "chaos-router",
    "retry-budget",
    "exp-backoff",
    "json-fill",
    "label-router",
    "hash-router",
    "wasi-probe",
];

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    for var in [
        "PATH",
        "KSTAGE_PLUGIN_OUT",
        "KSTAGE_KWOK_DIR",
        "KSTAGE_TRANSCRIPTS",
        "KSTAGE_REQUIRE_PLUGINS",
        "KSTAGE_REQUIRE_KUBECTL",
        "KSTAGE_REQUIRE_REGISTRY",
        "CI",
    ] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    println!("cargo::rustc-check-cfg=cfg(kstage_kubectl)");
    println!("cargo::rustc-check-cfg=cfg(kstage_registry)");
    let values: Vec<String> = COMPONENTS.iter().map(|c| format!("\"{c}\"")).collect();
    println!(
        "cargo::rustc-check-cfg=cfg(kstage_plugin, values({}))",
        values.join(", ")
    );

    let flag = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
    let kubectl = find_on_path("kubectl");
    if let Some(path) = &kubectl {
        println!("cargo::rerun-if-changed={}", path.display());
    }
    if kubectl.is_some() || flag("KSTAGE_REQUIRE_KUBECTL") || std::env::var_os("CI").is_some() {
        println!("cargo::rustc-cfg=kstage_kubectl");
    }

    let registry = find_on_path("docker-registry");
    if let Some(path) = &registry {
        println!("cargo::rerun-if-changed={}", path.display());
    }
    if registry.is_some() || flag("KSTAGE_REQUIRE_REGISTRY") {
        println!("cargo::rustc-cfg=kstage_registry");
    }

    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let out = std::env::var_os("KSTAGE_PLUGIN_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("target/plugins"));
    println!("cargo::rustc-env=KSTAGE_PLUGIN_OUT={}", out.display());
    let kwok = std::env::var_os("KSTAGE_KWOK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../shared/kwok"));
    println!("cargo::rustc-env=KSTAGE_KWOK_DIR={}", kwok.display());
    let transcripts = std::env::var_os("KSTAGE_TRANSCRIPTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../shared/kube-apiserver/transcripts"));
    println!(
        "cargo::rustc-env=KSTAGE_TRANSCRIPTS={}",
        transcripts.display()
    );
    let required = flag("KSTAGE_REQUIRE_PLUGINS");
    if !required {
        // When required, the cfgs do not depend on the folder: a build beside
        // `plugins/build` (as in CI) is not redone when it finishes.
        let stamp = out.join(".stamp");
        if !stamp.exists() {
            // Best effort: without it cargo re-runs this script every time, nothing worse.
            let _ = std::fs::create_dir_all(&out).and_then(|()| std::fs::write(&stamp, ""));
        }
        println!("cargo::rerun-if-changed={}", stamp.display());
    }
    for component in COMPONENTS {
        if required || out.join(format!("{component}.wasm")).is_file() {
            println!("cargo::rustc-cfg=kstage_plugin=\"{component}\"");
        }
    }
}

/// `program` in a folder of `PATH`, if it is an executable file there.
fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
