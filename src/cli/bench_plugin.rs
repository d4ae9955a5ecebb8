//! `kstage plugin bench`: µs per call of each capability a plugin exports, measured in
//! the same run as kstage's built-in implementation of that capability.

use std::path::PathBuf;
use std::process::ExitCode;

pub(super) fn run(file: PathBuf, calls: u32) -> anyhow::Result<ExitCode> {
    let _ = (file, calls);
    anyhow::bail!("not yet")
}
