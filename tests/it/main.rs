//! kstage's integration tests, built as one binary: the KWOK golden corpus, and the
//! command line end to end.

mod apiserver;
mod cli;
mod conformance;
mod deploy;
mod e2e;
mod engine;
mod examples;
mod faults;
mod fixtures;
mod hostile;
mod go_stress;
mod golden;
mod ipam;
mod kubectl;
mod kubectl_imperative;
mod oci;
mod plugin;
mod plugin_cli;
mod plugin_sim;
mod process;
mod protobuf;
mod rbac;
mod remote;
mod replicas;
mod restarts;
mod rollout;
mod scaffold;
mod serve;
mod sim;
mod stage_plugins;
mod stage_status;

use std::path::PathBuf;
use std::process::{Command, Output};

/// The KWOK corpus: `$KSTAGE_KWOK_DIR`, else `../shared/kwok` beside the project (as
/// resolved by `build.rs`).
pub fn kwok_dir() -> PathBuf {
    PathBuf::from(env!("KSTAGE_KWOK_DIR"))
}

/// The example component `name` in the plugin folder `plugins/build` writes to
/// (`$KSTAGE_PLUGIN_OUT`, default `target/plugins`, as resolved by `build.rs`). Tests that
/// need one are `ignored` unless `cfg(kstage_plugin = "NAME")` says it was built.
pub fn plugin_path(name: &str) -> PathBuf {
    PathBuf::from(env!("KSTAGE_PLUGIN_OUT")).join(format!("{name}.wasm"))
}

/// A fresh scratch folder for a test, named by `tag` and the process.
pub fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kstage-it-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

/// The project root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Run the kstage binary.
pub fn kstage(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kstage"))
        .args(args)
        .current_dir(root())
        .env_remove("KSTAGE_LOG")
        .output()
        .expect("the kstage binary runs")
}

/// Stdout of a run that must succeed.
pub fn ok(args: &[&str]) -> String {
    let out = kstage(args);
    assert!(
        out.status.success(),
        "kstage {args:?} failed with {:?}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}
