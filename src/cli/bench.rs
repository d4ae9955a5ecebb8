//! `kstage bench`: measure an API server (embedded or a cluster's) the way the engine
//! uses it.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::apiserver::{ApiServer, Config};
use crate::bench::{RawPatch, raw_patch};

/// Benchmark an API server.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Against an embedded API server started for the run.
    #[arg(
        long,
        conflicts_with = "kubeconfig",
        required_unless_present = "kubeconfig"
    )]
    embedded: bool,
    /// Against the cluster of this kubeconfig (its current context).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Measure the server's plain PATCH throughput (status patches to pods).
    #[arg(long)]
    raw_patch: bool,
    /// Concurrent requests.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// How long to send patches.
    #[arg(long, default_value = "10s", value_parser = super::duration::parse_std_duration)]
    duration: Duration,
    /// Pods to create and patch round robin (deleted afterwards).
    #[arg(long, default_value_t = 1000)]
    objects: usize,
    /// Namespace of the benchmark pods.
    #[arg(long, default_value = "default")]
    namespace: String,
}

/// At most this long per run: the benchmark is bounded.
const MAX_DURATION: Duration = Duration::from_secs(600);
/// At most this many pods.
const MAX_OBJECTS: usize = 100_000;

pub(super) fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if !args.raw_patch {
        anyhow::bail!(
            "only the raw PATCH benchmark exists so far: pass --raw-patch (the engine benchmark arrives with `kstage run`)"
        );
    }
    if args.duration > MAX_DURATION || args.objects > MAX_OBJECTS || args.objects == 0 {
        anyhow::bail!(
            "--duration is at most {}s and --objects between 1 and {MAX_OBJECTS}",
            MAX_DURATION.as_secs()
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (server, kubeconfig) = match &args.kubeconfig {
            Some(path) => {
                let k = Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                (None, k)
            }
            None => {
                let server = ApiServer::start(Config::default()).await?;
                let k = Kubeconfig::from_yaml(&server.kubeconfig())?;
                (Some(server), k)
            }
        };
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .context("cannot configure the client")?;
        let target = config.cluster_url.to_string();
        let client = kube::Client::try_from(config)?;
        let spec = RawPatch {
            concurrency: args.concurrency,
            duration: args.duration,
            objects: args.objects,
            namespace: args.namespace.clone(),
        };
        eprintln!(
            "kstage bench: raw PATCH against {target}{}: {} pods, {} concurrent, {:?}",
            if server.is_some() { " (embedded)" } else { "" },
            spec.objects,
            spec.concurrency,
            spec.duration
        );
        let report = raw_patch(client, &spec, |n, t| {
            eprint!("\r  {n} patches in {:.0} s ({:.0}/s)   ", t.as_secs_f64(), n as f64 / t.as_secs_f64());
            let _ = std::io::stderr().flush();
        })
        .await?;
        eprintln!();
        super::print(&format!(
            "raw PATCH: {:.0} requests/s ({} ok, {} errors in {:.2} s, concurrency {}), latency p50 {:.2} ms, p99 {:.2} ms\n",
            report.per_second(),
            report.ok,
            report.errors,
            report.elapsed.as_secs_f64(),
            spec.concurrency,
            report.p50.as_secs_f64() * 1e3,
            report.p99.as_secs_f64() * 1e3,
        ))?;
        drop(server);
        anyhow::Ok(if report.errors == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
    })
}
