//! `kstage bench`: measure an API server (embedded or a cluster's) the way the engine
//! uses it.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::apiserver::{ApiServer, Config};
use crate::bench::{
    Lifecycle, Process, RawPatch, growing_time, lifecycle, peak_rss_bytes, process_cpu, raw_patch,
};

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
    /// Measure the server's plain PATCH throughput (status patches to pods) first.
    #[arg(long)]
    raw_patch: bool,
    /// Measure raw PATCH a second time with the lifecycle's two pod watches open (the
    /// engine's and the load generator's): the server's rate when every write is also
    /// sent to two watchers, as each of the engine's writes is. Implies --raw-patch.
    #[arg(long)]
    raw_patch_watched: bool,
    /// Raw PATCH writes this status (a JSON or YAML file: e.g. the status a Stage writes,
    /// from `kstage stage explain`) instead of one field, to compare the engine with
    /// writes of its own size. Each patch still sets `status.message`.
    #[arg(long, value_name = "FILE")]
    raw_patch_status: Option<PathBuf>,
    /// Stages the engine plays in the lifecycle benchmark (e.g. KWOK's `stage/node/fast`
    /// and `stage/pod/fast`); without them only `--raw-patch` runs.
    #[arg(long = "stages", short = 's', num_args = 1..)]
    stages: Vec<PathBuf>,
    /// Nodes to create in the lifecycle benchmark.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Pods to create in the lifecycle benchmark (bound to the nodes round robin).
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Start the engine once every node and pod is created, so the lifecycle measures the
    /// engine's throughput rather than the load generator's (the figure to compare with
    /// `--raw-patch`); times are still from the first creation.
    #[arg(long, conflicts_with = "external")]
    backlog: bool,
    /// The engine runs elsewhere (`kstage run` in another process, a Deployment, or
    /// another controller): only create the load and measure; no `--stages` needed.
    #[arg(long)]
    external: bool,
    /// With `--external`, the engine's process on this machine: its CPU seconds and peak
    /// RSS are read from `/proc/PID`.
    #[arg(long, requires = "external")]
    engine_pid: Option<u32>,
    /// Runtime worker threads of this process (the engine, the load generator and raw
    /// PATCH alike); default: one per CPU. As `kstage run --threads`.
    #[arg(long)]
    threads: Option<std::num::NonZeroUsize>,
    /// Engine workers.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// Pod IP range(s) of the engine: `V4` or `V4,V6` (default 10.244.0.0/16, 65,534
    /// pods).
    #[arg(long)]
    cidr: Option<String>,
    /// Give up the lifecycle benchmark after this long.
    #[arg(long, default_value = "300s", value_parser = super::duration::parse_std_duration)]
    timeout: Duration,
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
    /// Bind the pods to the first N nodes only (default: all, round robin).
    #[arg(long, default_value_t = 0)]
    pod_nodes: usize,
    /// KWOK's benchmark scenario: 5,000 nodes Ready, then 10,000 pods on one node
    /// Running, then their deletion, printed beside the limits KWOK's CI passes with
    /// (60 s, 60 s, 90 s). Sets --nodes, --pods and --pod-nodes.
    #[arg(long)]
    kwok_scenario: bool,
    /// With the engine in this process: serve its `/metrics` on a loopback port and fetch
    /// it every INTERVAL (e.g. `1s`) during the lifecycle, as Prometheus would. Compare
    /// runs with and without it for what scraping costs.
    #[arg(long, value_parser = super::duration::parse_std_duration, conflicts_with = "external")]
    scrape: Option<Duration>,
    /// Churn for this long (e.g. `30m`): the lifecycle again and again with the engine in
    /// this process, sampling its RSS, open file descriptors, queue depth and
    /// transitions/s every `--sample`; fails (exit 1) when RSS or descriptors grow by more
    /// than 10% after the warm-up (the first fifth).
    #[arg(long, value_parser = super::duration::parse_std_duration, conflicts_with_all = ["external", "backlog"], requires = "stages")]
    soak: Option<Duration>,
    /// How often `--soak` samples.
    #[arg(long, default_value = "10s", value_parser = super::duration::parse_std_duration)]
    sample: Duration,
}

/// KWOK's benchmark: nodes, pods (all on one node), and the limits of its CI for nodes
/// Ready, pods Running and pods deleted.
const KWOK_SCENARIO: (usize, usize, [u64; 3]) = (5_000, 10_000, [60, 60, 90]);

/// At most this long per run: the benchmark is bounded.
const MAX_DURATION: Duration = Duration::from_secs(600);
/// At most this many pods.
const MAX_OBJECTS: usize = 100_000;

pub(super) fn run(mut args: BenchArgs) -> anyhow::Result<ExitCode> {
    if args.kwok_scenario {
        (args.nodes, args.pods, _) = KWOK_SCENARIO;
        args.pod_nodes = 1;
    }
    if !args.raw_patch && !args.raw_patch_watched && args.stages.is_empty() && !args.external {
        anyhow::bail!(
            "nothing to measure: give --raw-patch and/or --stages PATH... (e.g. ../shared/kwok/stage/node/fast ../shared/kwok/stage/pod/fast) or --external"
        );
    }
    if args.external && !args.stages.is_empty() {
        anyhow::bail!("--external measures an engine run elsewhere: leave out --stages");
    }
    if args.external && args.kubeconfig.is_none() {
        anyhow::bail!("--external needs --kubeconfig: the cluster the other engine plays");
    }
    if args.duration > MAX_DURATION
        || args.timeout > MAX_DURATION
        || args.objects > MAX_OBJECTS
        || args.objects == 0
        || args.pods > MAX_OBJECTS
        || args.nodes > MAX_OBJECTS
    {
        anyhow::bail!(
            "--duration and --timeout are at most {}s; --objects, --nodes and --pods at most {MAX_OBJECTS}",
            MAX_DURATION.as_secs()
        );
    }
    let clock: std::sync::Arc<dyn crate::clock::Clock> =
        std::sync::Arc::new(crate::clock::SystemClock);
    let env = super::run::template_env(clock.clone(), args.cidr.as_deref(), &[])?;
    let renderer = crate::template::Renderer::new(env.clone());
    let stages = super::run::stage_files(&args.stages, &renderer)?;
    let runtime = super::runtime(args.threads)?;
    runtime.block_on(async {
        let (server, config) = match &args.kubeconfig {
            Some(path) => (None, super::run::client_config(Some(path)).await?),
            None => {
                // A soak keeps the embedded server's watch history short: the default
                // (50,000 events per kind) would grow this process for minutes and hide
                // the engine's own figure.
                let config = match args.soak {
                    Some(_) => Config {
                        history_limit: 2_000,
                        ..Config::default()
                    },
                    None => Config::default(),
                };
                let server = ApiServer::start(config).await?;
                let config = super::run::embedded_config(&server).await?;
                (Some(server), config)
            }
        };
        let target = config.cluster_url.to_string();
        let client = kube::Client::try_from(config.clone())?;
        let mut raw_rate = None;
        let mut failed = false;
        let mut watched_rate = None;
        // Bare first (the yardstick), then with the lifecycle's watches open.
        let variants: &[bool] = match (args.raw_patch, args.raw_patch_watched) {
            (_, true) => &[false, true],
            (true, false) => &[false],
            (false, false) => &[],
        };
        let status = match &args.raw_patch_status {
            Some(path) => Some(read_status(path)?),
            None => None,
        };
        for &watched in variants {
            let spec = RawPatch {
                status: status.clone(),
                concurrency: args.concurrency,
                duration: args.duration,
                objects: args.objects,
                namespace: args.namespace.clone(),
                watched,
            };
            let name = if watched { "raw PATCH, watched" } else { "raw PATCH" };
            eprintln!(
                "kstage bench: {name} against {target}{}: {} pods, {} concurrent, {:?}{}",
                if server.is_some() { " (embedded)" } else { "" },
                spec.objects,
                spec.concurrency,
                spec.duration,
                if watched { ", 2 pod watches open" } else { "" },
            );
            let report = raw_patch(client.clone(), &spec, |n, t| {
                eprint!("\r  {n} patches in {:.0} s ({:.0}/s)   ", t.as_secs_f64(), n as f64 / t.as_secs_f64());
                let _ = std::io::stderr().flush();
            })
            .await?;
            eprintln!();
            super::print(&format!(
                "{name}: {:.0} requests/s ({} ok, {} errors in {:.2} s, concurrency {}), latency p50 {:.2} ms, p99 {:.2} ms\n",
                report.per_second(),
                report.ok,
                report.errors,
                report.elapsed.as_secs_f64(),
                spec.concurrency,
                report.p50.as_secs_f64() * 1e3,
                report.p99.as_secs_f64() * 1e3,
            ))?;
            *if watched { &mut watched_rate } else { &mut raw_rate } = Some(report.per_second());
            failed |= report.errors > 0;
        }
        if !stages.is_empty() || args.external {
            let cluster = if args.external {
                None
            } else {
                Some(
                    crate::cluster::client::KubeCluster::new(config)
                        .map_err(|e| anyhow::anyhow!(e.message))?,
                )
            };
            let engine_config = crate::engine::EngineConfig {
                workers: args.workers,
                clock,
                observer: Some(env.clone()),
                ..crate::engine::EngineConfig::default()
            };
            let daemon = std::sync::Mutex::new(None);
            let scrapes = std::sync::Arc::new(crate::bench::scrape::Scrapes::default());
            let scraping = std::sync::Mutex::new(None::<tokio::task::JoinHandle<()>>);
            let started_at = std::sync::Mutex::new(None);
            let start = || {
                *started_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Some(tokio::time::Instant::now());
                if let Some(cluster) = cluster {
                    let started = crate::daemon::Daemon::start(
                        std::sync::Arc::new(cluster),
                        stages,
                        crate::daemon::Resources::default(),
                        renderer,
                        engine_config,
                        crate::decide::Deciders::default(),
                    );
                    if let Some(every) = args.scrape {
                        *scraping.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                            Some(tokio::spawn(crate::bench::scrape::run(
                                started.engine().clone(),
                                every,
                                scrapes.clone(),
                            )));
                    }
                    *daemon.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(started);
                }
            };
            // With --backlog the engine starts once every object is created.
            let mut start = Some(start);
            if !args.backlog
                && let Some(start) = start.take()
            {
                start();
            }
            let process = match args.engine_pid {
                Some(pid) => Some(Process::Pid(pid)),
                None if args.external => None,
                None => Some(Process::Current),
            };
            let spec = Lifecycle {
                nodes: args.nodes,
                pods: args.pods,
                concurrency: args.concurrency,
                timeout: args.timeout,
                namespace: args.namespace.clone(),
                pod_nodes: args.pod_nodes,
            };
            eprintln!(
                "kstage bench: {} nodes and {} pods against {target}{}, {} concurrent creates{}",
                spec.nodes,
                spec.pods,
                if server.is_some() { " (embedded)" } else { "" },
                spec.concurrency,
                if args.external { ", engine run elsewhere" } else { "" },
            );
            if let Some(duration) = args.soak {
                if let Some(start) = start.take() {
                    start();
                }
                let engine = daemon
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .as_ref()
                    .map(|d| d.engine().clone())
                    .ok_or_else(|| anyhow::anyhow!("the engine did not start"))?;
                eprintln!("kstage bench: soak for {duration:?}, a sample every {:?}", args.sample);
                let report = crate::bench::soak::soak(client, &spec, engine, duration, args.sample, |s| {
                    println!("soak: {s}");
                })
                .await
                .map_err(|f| anyhow::anyhow!("the soak stopped: {}", f.error))?;
                let percent = |g: Option<f64>| g.map_or_else(|| "not judged (fewer than 5 samples)".to_owned(), |g| format!("{:+.1}%", g * 100.0));
                super::print(&format!(
                    "soak: {} rounds in {:?}; after the warm-up RSS {}, open fds {}\n",
                    report.rounds,
                    duration,
                    percent(report.rss_growth),
                    percent(report.fds_growth),
                ))?;
                let grew = [report.rss_growth, report.fds_growth].iter().flatten().any(|g| *g > 0.10);
                drop(server);
                return anyhow::Ok(if grew { ExitCode::from(1) } else { ExitCode::SUCCESS });
            }
            let cpu = || process.and_then(process_cpu).unwrap_or_default();
            let writes = || {
                daemon
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .as_ref()
                    .map(|d| crate::engine::Metrics::get(&d.engine().metrics().writes))
            };
            let transitions = || {
                daemon
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .as_ref()
                    .map(|d| d.engine().metrics().transitions_total())
            };
            let cpu_before = cpu();
            let writes_before = writes().unwrap_or(0);
            let transitions_before = transitions().unwrap_or(0);
            // The time the engine spends writing: 10 ms ticks in which its write count
            // grew (startup, the initial list and the waits between phases excluded).
            let stop = std::sync::atomic::AtomicBool::new(false);
            let sampler = growing_time(|| writes().unwrap_or(writes_before), &stop);
            let run = async {
                let report = lifecycle(
                    client,
                    &spec,
                    || {
                        if let Some(start) = start {
                            start();
                        }
                    },
                    |line| {
                        eprint!("\r  {line}        ");
                        let _ = std::io::stderr().flush();
                    },
                )
                .await;
                stop.store(true, std::sync::atomic::Ordering::Release);
                report
            };
            let (report, writing) = tokio::join!(run, sampler);
            eprintln!();
            let cpu = cpu().saturating_sub(cpu_before);
            let writes = writes().map(|after| after - writes_before);
            let transitions = transitions().map(|after| after - transitions_before);
            if let Some(daemon) = daemon
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
            {
                daemon.shutdown();
            }
            let (measured, error) = match &report {
                Ok(report) => (crate::bench::Measured::from(report), None),
                Err(failure) => (failure.measured.clone(), Some(&failure.error)),
            };
            // The engine's busy time: from its start (all objects waiting with
            // --backlog) until all pods Running, and the deletion.
            let busy = measured
                .pods_running
                .map_or(Duration::ZERO, |(running, _, _)| running)
                .saturating_sub(if args.backlog {
                    measured.engine_started.unwrap_or_default()
                } else {
                    Duration::ZERO
                })
                + measured.deleted.unwrap_or_default();
            let per_second = |(n, t): (u64, Duration)| n as f64 / t.as_secs_f64().max(1e-9);
            let of_raw = |rate: f64| {
                let mut of = raw_rate.map_or_else(String::new, |raw| {
                    format!(" = {:.0}% of the raw PATCH rate", 100.0 * rate / raw)
                });
                if let Some(watched) = watched_rate {
                    of += &format!(", {:.0}% of the watched one", 100.0 * rate / watched);
                }
                of
            };
            // With --backlog, the phase the engine starts with all its work waiting (until
            // every pod is Running) is the one to compare with raw PATCH; in the deletion
            // its work arrives only as fast as the load generator deletes.
            let drained = match (
                args.backlog,
                *started_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
                measured.engine_started,
                measured.pods_running,
            ) {
                (true, Some(at), Some(started), Some((running, _, _))) => {
                    Some(at + running.saturating_sub(started))
                }
                _ => None,
            };
            let engine = match writes {
                Some(writes) => {
                    let rate = writes as f64 / busy.as_secs_f64().max(1e-9);
                    let all = writing.until(None);
                    let phases = match drained {
                        Some(at) => {
                            let (drain, rest) = (writing.until(Some(at)), writing.after(at));
                            format!(
                                "; draining the backlog {} writes at {:.0} writes/s while writing ({:.2} s){}; deleting {} writes at {:.0} writes/s (as fast as the load generator deletes)",
                                drain.0,
                                per_second(drain),
                                drain.1.as_secs_f64(),
                                of_raw(per_second(drain)),
                                rest.0,
                                per_second(rest),
                            )
                        }
                        None => String::new(),
                    };
                    format!(
                        "{writes} writes, {rate:.0} writes/s over the lifecycle, {:.0} writes/s while writing ({:.2} s){}{phases}\n  ",
                        per_second(all),
                        all.1.as_secs_f64(),
                        of_raw(per_second(all)),
                    )
                }
                None => String::new(),
            };
            let usage = match process {
                Some(process) => format!(
                    "process CPU {:.1} s, peak RSS {:.0} MB{}",
                    cpu.as_secs_f64(),
                    peak_rss_bytes(process).unwrap_or(0) as f64 / 1e6,
                    match (process, server.is_some()) {
                        (Process::Pid(pid), _) => format!(" (process {pid})"),
                        (Process::Current, true) => " (engine, embedded API server and load generator together)".to_owned(),
                        (Process::Current, false) => " (engine and load generator together)".to_owned(),
                    }
                ),
                None => "not measured (give --engine-pid)".to_owned(),
            };
            // CPU per 1,000 transitions: what the engine costs per unit of work, a figure
            // that holds on a shared machine where it competes with the API server.
            let per_transition = match (transitions, process) {
                (Some(n), Some(_)) if n > 0 => format!(
                    ", {n} transitions, {:.3} CPU s per 1,000 transitions{}",
                    cpu.as_secs_f64() * 1000.0 / n as f64,
                    if server.is_some() { " (with the embedded API server's share)" } else { "" }
                ),
                _ => String::new(),
            };
            let secs = |d: Option<Duration>| {
                d.map_or_else(|| "(not reached)".to_owned(), |d| format!("in {:.2} s", d.as_secs_f64()))
            };
            super::print(&format!(
                "lifecycle: {} nodes Ready {}, {} pods Running {}{}, deleted {}{}\n  engine: {engine}{usage}{per_transition}\n",
                spec.nodes,
                secs(measured.nodes_ready),
                spec.pods,
                secs(measured.pods_running.map(|(running, _, _)| running)),
                measured.pods_running.map_or_else(String::new, |(_, p50, p99)| format!(
                    " (create to Running p50 {:.0} ms, p99 {:.0} ms)",
                    p50.as_secs_f64() * 1e3,
                    p99.as_secs_f64() * 1e3
                )),
                secs(measured.deleted),
                match (args.backlog, measured.engine_started) {
                    (true, Some(at)) => format!(
                        "; the engine started after the last creation, at {:.2} s",
                        at.as_secs_f64()
                    ),
                    _ => String::new(),
                },
            ))?;
            if let Some(every) = args.scrape {
                if let Some(task) = scraping.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
                    task.abort();
                }
                super::print(&format!("  metrics: {}\n", scrapes.summary(every)))?;
            }
            if args.kwok_scenario {
                let [nodes, pods, deleted] = KWOK_SCENARIO.2;
                let verdict = |d: Option<Duration>, limit: u64| match d {
                    Some(d) if d.as_secs_f64() <= limit as f64 => format!("{:.2} s (limit {limit} s: within)", d.as_secs_f64()),
                    Some(d) => format!("{:.2} s (limit {limit} s: over)", d.as_secs_f64()),
                    None => format!("not reached (limit {limit} s)"),
                };
                super::print(&format!(
                    "KWOK's scenario beside its CI limits: nodes Ready {}, pods Running {}, pods deleted {}\n",
                    verdict(measured.nodes_ready, nodes),
                    verdict(measured.pods_running.map(|(running, _, _)| running), pods),
                    verdict(measured.deleted, deleted),
                ))?;
            }
            if let Some(error) = error {
                anyhow::bail!("the lifecycle benchmark stopped: {error} (the figures above are what it measured before)");
            }
        }
        drop(server);
        anyhow::Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
    })
}

/// The status object of `--raw-patch-status`.
fn read_status(
    path: &std::path::Path,
) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    match crate::yaml::to_json(&text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => anyhow::bail!("{}: a status must be an object", path.display()),
        Err(e) => anyhow::bail!("{}: {e}", path.display()),
    }
}
