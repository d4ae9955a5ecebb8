//! `kstage plugin check`: what a component is, whether kstage would load it, and the
//! StagePlugin that deploys it (`--manifest` prints only that, for `kubectl apply -f -`).

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};

use crate::cli::Output;
use crate::plugin::{Capability, Settings};

/// Arguments of `kstage plugin check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The plugin component (`.wasm`).
    file: PathBuf,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    output: Output,
    /// Let the plugin's stderr through to the terminal (by default it is kept, and its
    /// last lines are shown when a call traps).
    #[arg(long)]
    stderr: bool,
    /// Print only the StagePlugin that deploys this component (YAML, for `kubectl apply
    /// -f -`); nothing when the component has problems (exit 1).
    #[arg(long)]
    manifest: bool,
    /// The StagePlugin's source: the ConfigMap `NAMESPACE/NAME` holding the component
    /// under its file name.
    #[arg(
        long,
        value_name = "NAMESPACE/NAME",
        default_value = "kstage/kstage-plugin-components",
        conflicts_with_all = ["url", "oci"]
    )]
    config_map: String,
    /// The StagePlugin's source: an http or https URL serving the component.
    #[arg(long, conflicts_with = "oci")]
    url: Option<String>,
    /// The StagePlugin's source: an OCI reference (`oci://REGISTRY/REPOSITORY:TAG`, as
    /// `kstage plugin push` printed it).
    #[arg(long)]
    oci: Option<String>,
}

/// The largest component a ConfigMap source holds, about: kube-apiserver refuses a body
/// over 3 MiB and etcd an object over about 1.5 MiB, and `binaryData` is base64 (a third
/// larger than the file).
const CONFIG_MAP_LIMIT: u64 = 1 << 20;

/// Where the StagePlugin printed by `check` takes the component from.
#[derive(Debug, Clone)]
enum ManifestSource {
    /// A ConfigMap's `binaryData` key.
    ConfigMap {
        namespace: String,
        name: String,
        key: String,
    },
    /// A URL.
    Url(String),
    /// An OCI reference.
    Oci(String),
}

impl ManifestSource {
    fn from_args(args: &CheckArgs) -> anyhow::Result<Self> {
        if let Some(reference) = &args.oci {
            crate::plugin::oci::parse_reference(reference)
                .map_err(|e| anyhow::anyhow!("--oci: {e}"))?;
            return Ok(Self::Oci(reference.clone()));
        }
        if let Some(url) = &args.url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                anyhow::bail!("--url {url:?}: not an http or https URL");
            }
            return Ok(Self::Url(url.clone()));
        }
        let Some((namespace, name)) = args
            .config_map
            .split_once('/')
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
        else {
            anyhow::bail!("--config-map {:?}: give NAMESPACE/NAME", args.config_map);
        };
        let key = args
            .file
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin.wasm".to_owned());
        Ok(Self::ConfigMap {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key,
        })
    }

    fn to_json(&self) -> Value {
        match self {
            Self::ConfigMap {
                namespace,
                name,
                key,
            } => json!({"configMap": {"namespace": namespace, "name": name, "key": key}}),
            Self::Url(url) => json!({"url": url}),
            Self::Oci(reference) => json!({"oci": {"reference": reference}}),
        }
    }

    /// How to put the component where the source says, when kstage can say it.
    fn upload_hint(&self, file: &str) -> Option<String> {
        match self {
            Self::ConfigMap {
                namespace, name, ..
            } => Some(format!(
                "kubectl -n {namespace} create configmap {name} --from-file={file}"
            )),
            Self::Url(_) | Self::Oci(_) => None,
        }
    }
}

/// The StagePlugin deploying `plugin` from `source`, bound to every decision it exports.
fn stage_plugin(plugin: &crate::plugin::Plugin, source: &ManifestSource) -> Value {
    let bind: Vec<String> = plugin
        .capabilities()
        .iter()
        .filter(|c| **c != Capability::Metadata)
        .map(ToString::to_string)
        .collect();
    json!({
        "apiVersion": "kstage.dev/v1alpha1",
        "kind": "StagePlugin",
        "metadata": {"name": plugin.info().name},
        "spec": {
            "source": source.to_json(),
            "sha256": plugin.digest(),
            "bind": bind,
        },
    })
}

/// What each family of WASI imports would need granted.
fn wasi_needs(imports: &[String]) -> Vec<String> {
    let mut needs = Vec::new();
    let mut add = |what: &str| {
        if !needs.iter().any(|n| n == what) {
            needs.push(what.to_owned());
        }
    };
    for import in imports {
        let Some(rest) = import.strip_prefix("wasi:") else {
            continue;
        };
        if rest.starts_with("filesystem/") {
            add("files (grant readDirs; denied by default: the plugin sees no folder)");
        } else if rest.starts_with("sockets/") {
            add("network (grant network; denied by default)");
        } else if rest.starts_with("cli/environment") {
            add("environment (grant env; empty by default)");
        } else if rest.starts_with("cli/stdout") || rest.starts_with("cli/stderr") {
            add("output (grant stdout/stderr; discarded by default)");
        }
    }
    needs
}

pub(super) fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let source = ManifestSource::from_args(&args)?;
    let runtime = super::runtime()?;
    let file = args.file.display().to_string();
    let size = std::fs::metadata(&args.file).map(|m| m.len()).unwrap_or(0);
    let mut settings = Settings::default();
    settings.grants.stderr = args.stderr;
    let (report, ok) = match super::load(&runtime, &args.file, settings) {
        Err(e) => (json!({"file": file, "problems": [format!("{e:#}")]}), false),
        Ok(plugin) => {
            let problems: Vec<String> = plugin.validate().err().into_iter().collect();
            let ok = problems.is_empty();
            let mut report = json!({
                "file": file,
                "size": size,
                "sha256": plugin.digest(),
                "name": plugin.info().name,
                "version": plugin.info().version,
                "interfaceVersion": plugin.info().interface_version,
                "capabilities": plugin.capabilities(),
                "imports": plugin.imports(),
                "wasi": wasi_needs(plugin.imports()),
                "problems": problems,
                "compileCache": super::compile_cache(&runtime),
            });
            if ok {
                report["stagePlugin"] = stage_plugin(&plugin, &source);
                if let Some(note) = size_note(size, &source) {
                    report["notes"] = json!([note]);
                }
            }
            (report, ok)
        }
    };
    if args.manifest {
        for note in list(&report, "notes") {
            eprintln!("note: {note}");
        }
        if let Some(manifest) = report.get("stagePlugin") {
            crate::cli::print(&crate::yaml::to_string(manifest))?;
        } else {
            eprint!("{}", check_text(&report, &source));
        }
    } else {
        match args.output {
            Output::Text => crate::cli::print(&check_text(&report, &source))?,
            other => crate::cli::print_value(&report, other)?,
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A warning when the component is too big for the ConfigMap the manifest names.
fn size_note(size: u64, source: &ManifestSource) -> Option<String> {
    (matches!(source, ManifestSource::ConfigMap { .. }) && size > CONFIG_MAP_LIMIT).then(|| {
        format!(
            "the component is {:.1} MiB: a ConfigMap holds about 1 MiB of component; \
             serve it from a registry (--oci) or a URL (--url) instead",
            size as f64 / f64::from(1 << 20)
        )
    })
}

/// The strings of the report's list `key`.
fn list(report: &Value, key: &str) -> Vec<String> {
    report
        .get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn check_text(report: &Value, source: &ManifestSource) -> String {
    let text = |key: &str| report.get(key).and_then(Value::as_str).unwrap_or_default();
    let list = |key: &str| list(report, key);
    let mut out = format!("plugin {}\n", text("file"));
    if report.get("sha256").is_some() {
        out.push_str(&format!("  sha256:       {}\n", text("sha256")));
        out.push_str(&format!(
            "  metadata:     {} {} (interface {})\n",
            text("name"),
            text("version"),
            text("interfaceVersion")
        ));
        out.push_str(&format!(
            "  capabilities: {}\n",
            list("capabilities").join(", ")
        ));
        let imports = list("imports");
        out.push_str(&format!(
            "  imports:      {}\n",
            if imports.is_empty() {
                "none".to_owned()
            } else {
                imports.join(", ")
            }
        ));
        out.push_str(&format!("  compiled:     {}\n", text("compileCache")));
        for need in list("wasi") {
            out.push_str(&format!("  wasi:         {need}\n"));
        }
    }
    let problems = list("problems");
    if problems.is_empty() {
        out.push_str("  ok\n");
    }
    for problem in problems {
        out.push_str(&format!("  problem:      {problem}\n"));
    }
    if let Some(manifest) = report.get("stagePlugin") {
        out.push_str(&manifest_text(
            manifest,
            source,
            text("file"),
            &list("notes"),
        ));
    }
    out
}

/// The StagePlugin block of the text report: how to apply it, then the YAML.
fn manifest_text(
    manifest: &Value,
    source: &ManifestSource,
    file: &str,
    notes: &[String],
) -> String {
    let mut out = String::from("\nStagePlugin");
    match source.upload_hint(file).filter(|_| notes.is_empty()) {
        Some(upload) => out.push_str(&format!(
            " (put the component in its ConfigMap: `{upload}`, then\n\
             `kstage plugin check {file} --manifest | kubectl apply -f -`):\n"
        )),
        None => out.push_str(&format!(
            " (`kstage plugin check {file} --manifest --url URL | kubectl apply -f -`):\n"
        )),
    }
    for note in notes {
        out.push_str(&format!("# note: {note}\n"));
    }
    out.push_str(&crate::yaml::to_string(manifest));
    out
}
