//! `kstage plugin push FILE oci://REGISTRY/REPOSITORY:TAG`: a component pushed as a Wasm
//! OCI artifact (see `plugin::oci`), with the digests a user pins printed.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::plugin::oci::{self, Auth};

/// Arguments of `kstage plugin push`.
#[derive(Debug, clap::Args)]
pub struct PushArgs {
    /// The plugin component (`.wasm`).
    file: PathBuf,
    /// Where to: `oci://REGISTRY/REPOSITORY:TAG` (the `oci://` prefix is optional).
    reference: String,
    /// The registry user (with `--password-stdin`); default: the docker config file's
    /// credentials for the registry (`$DOCKER_CONFIG/config.json`, else
    /// `~/.docker/config.json`), else none.
    #[arg(long, short = 'u', requires = "password_stdin")]
    username: Option<String>,
    /// Read the password (or token) from standard input.
    #[arg(long, requires = "username")]
    password_stdin: bool,
    /// Talk http instead of https (a registry on loopback without TLS).
    #[arg(long)]
    plain_http: bool,
}

pub(super) fn run(args: PushArgs) -> anyhow::Result<ExitCode> {
    let component =
        std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    // A component's preamble: `\0asm`, then version 0x0d and layer 1.
    if !component.starts_with(b"\0asm\x0d\x00\x01\x00") {
        anyhow::bail!(
            "{}: not a WebAssembly component (a core module must be made a component first)",
            args.file.display()
        );
    }
    let reference = oci::parse_reference(&args.reference).map_err(anyhow::Error::msg)?;
    if reference.digest().is_some() {
        anyhow::bail!("{}: push to a tag, not a digest", args.reference);
    }
    let auth = match args.username {
        Some(username) => {
            let mut password = String::new();
            std::io::stdin()
                .read_to_string(&mut password)
                .context("reading the password from standard input")?;
            Auth::Basic {
                username,
                password: password.trim_end_matches(['\r', '\n']).to_owned(),
            }
        }
        None => Auth::docker_config(reference.resolve_registry()).map_err(anyhow::Error::msg)?,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let pushed = runtime
        .block_on(oci::push(
            &component,
            &args.reference,
            args.plain_http,
            &auth,
        ))
        .map_err(anyhow::Error::msg)?;
    let repository = format!(
        "{}/{}",
        reference.resolve_registry(),
        reference.repository()
    );
    println!("pushed {}", reference.whole());
    println!("manifest digest: {}", pushed.manifest_digest);
    println!("sha256: {}", pushed.sha256);
    println!("pin it: oci: {repository}@{}", pushed.manifest_digest);
    Ok(ExitCode::SUCCESS)
}
