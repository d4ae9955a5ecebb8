//! `kstage run` (the daemon against a cluster) and `kstage up` (the embedded API server
//! and the daemon together, for a laptop).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::Value;

use crate::apiserver::{ApiServer, Config};
use crate::clock::{Clock, SystemClock};
use crate::cluster::client::KubeCluster;
use crate::cluster::managed::{ManagedNodes, ObjectSelectors};
use crate::daemon::Daemon;
use crate::engine::{EngineConfig, LoopGuard};
use crate::stage::Stage;
use crate::template::{Renderer, StageEnv};

/// The engine's flags, shared by `kstage run` and `kstage up`.
#[derive(Debug, clap::Args)]
pub struct EngineArgs {
    /// Workers playing Stages concurrently.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// On SIGTERM or SIGINT, how long the Stages being played may take to finish before
    /// the process exits anyway (keep it below the Pod's terminationGracePeriodSeconds).
    /// A second signal exits at once.
    #[arg(long, default_value = "20s", value_parser = super::duration::parse_std_duration)]
    shutdown_grace: Duration,
    /// Pod IP range(s): `V4` or `V4,V6` (dual-stack); default 10.244.0.0/16. Addresses are
    /// released when their pod goes away.
    #[arg(long)]
    cidr: Option<String>,
    /// Plugin configuration (YAML: `plugins:` and `bindings:`, see plugins/README.md);
    /// plugin files are hot-swapped when they change, the whole file is read again on
    /// SIGHUP.
    #[arg(long)]
    config: Option<PathBuf>,
    /// How fast one object may play the same Stage again: `BURST/WINDOW` (plays within
    /// a Go duration); past it the object is slowed down (one play per WINDOW, doubling
    /// up to a minute), with a warning and a Warning Event. `off` turns the guard off.
    #[arg(long, default_value = "20/1s", value_parser = parse_loop_guard)]
    loop_guard: LoopGuard,
    /// Runtime worker threads; default: one per CPU the process may use (its cgroup
    /// quota included). Where the engine shares a small machine with its API server,
    /// `--threads 1` spends less CPU per transition (fewer cross-thread wake-ups): see
    /// the README's performance table.
    #[arg(long)]
    threads: Option<std::num::NonZeroUsize>,
    /// Environment variables sprig's `env` and `expandenv` may read in Stage templates
    /// (`NAME,...`); none by default, so a Stage cannot copy the daemon's secrets into an
    /// object.
    #[arg(long, value_delimiter = ',')]
    template_env: Vec<String>,
}

/// `--loop-guard BURST/WINDOW | off`.
pub(super) fn parse_loop_guard(text: &str) -> Result<LoopGuard, String> {
    if text == "off" {
        return Ok(LoopGuard::off());
    }
    let usage = || format!("{text:?}: give BURST/WINDOW (e.g. 20/1s) or off");
    let (burst, window) = text.split_once('/').ok_or_else(usage)?;
    let burst: u32 = burst.trim().parse().map_err(|_| usage())?;
    let window = super::duration::parse_std_duration(window)?;
    if burst == 0 || window.is_zero() {
        return Err(format!(
            "{text:?}: the burst and the window must be above zero"
        ));
    }
    Ok(LoopGuard {
        burst,
        window,
        ..LoopGuard::default()
    })
}

/// Play Stages against a cluster.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The kubeconfig (its current context); default: in-cluster, then `$KUBECONFIG`
    /// or `~/.kube/config`.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Stage files or folders.
    #[arg(long = "stages", short = 's', num_args = 1..)]
    stages: Vec<PathBuf>,
    /// Also play the cluster's Stage resources, live (added, changed and deleted ones
    /// take effect without a restart).
    #[arg(long)]
    stage_crds: bool,
    /// Also take plugins from the cluster's StagePlugin resources (`kstage.dev/v1alpha1`,
    /// CRD in deploy/crds): fetched, checked against their sha256, hot-swapped, with their
    /// status written; beside the `--config` file's.
    #[arg(long)]
    plugin_crds: bool,
    /// How the engine runs.
    #[command(flatten)]
    engine: EngineArgs,
    /// Manage only the nodes with these labels (a Kubernetes selector), and their pods.
    #[arg(long, group = "nodes")]
    manage_nodes_with_label_selector: Option<String>,
    /// Manage only the nodes with these annotations (selector syntax), and their pods.
    #[arg(long, group = "nodes")]
    manage_nodes_with_annotation_selector: Option<String>,
    /// Manage only this node, and its pods.
    #[arg(long, group = "nodes")]
    manage_single_node: Option<String>,
    /// Manage every node and every pod (the default).
    #[arg(long, group = "nodes")]
    manage_all_nodes: bool,
    /// Play only the objects of a kind with these labels: `KIND[.GROUP]=SELECTOR`
    /// (`Deployment.apps=app=web`; repeatable; pods keep their node selection too).
    #[arg(long = "object-selector", value_name = "KIND[.GROUP]=SELECTOR")]
    object_selectors: Vec<String>,
    /// Requests per second to the API server (watches excepted); 0: unlimited (default,
    /// as KWOK).
    #[arg(long, default_value_t = 0.0)]
    qps: f64,
    /// Requests allowed at once above `--qps`.
    #[arg(long, default_value_t = 10)]
    burst: u32,
    /// Hold a `coordination.k8s.io` Lease per managed node (in `kube-node-lease`) and play
    /// only the nodes held, so several replicas split the nodes.
    #[arg(long)]
    node_leases: bool,
    /// The Leases' duration; they are renewed every quarter of it.
    #[arg(long, default_value = "40s", value_parser = super::duration::parse_std_duration)]
    lease_duration: Duration,
    /// This replica's `holderIdentity` (default: `$POD_NAME`, else `$HOSTNAME`, else a
    /// name made from the process id).
    #[arg(long)]
    identity: Option<String>,
    /// Where to serve `/livez`, `/readyz`, `/healthz` and `/metrics` (HOST:PORT), or
    /// `off`.
    #[arg(long, default_value = "0.0.0.0:8080", value_parser = crate::serve::parse_serve)]
    serve: crate::serve::ServeAddr,
}

impl RunArgs {
    fn managed_nodes(&self) -> anyhow::Result<ManagedNodes> {
        let managed = if let Some(s) = &self.manage_nodes_with_label_selector {
            ManagedNodes::labels(s).context("the node label selector")?
        } else if let Some(s) = &self.manage_nodes_with_annotation_selector {
            ManagedNodes::annotations(s).context("the node annotation selector")?
        } else if let Some(n) = &self.manage_single_node {
            ManagedNodes::Single(n.clone())
        } else {
            ManagedNodes::All
        };
        Ok(managed)
    }

    fn object_selectors(&self) -> anyhow::Result<ObjectSelectors> {
        let mut selectors = ObjectSelectors::default();
        for text in &self.object_selectors {
            selectors
                .add(text)
                .map_err(|e| anyhow::anyhow!("--object-selector {e}"))?;
        }
        Ok(selectors)
    }
}

/// Start an embedded API server and play Stages against it.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Port of the API server; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Where to write the kubeconfig.
    #[arg(long, default_value = "kstage.kubeconfig")]
    kubeconfig: PathBuf,
    /// Stage files or folders (default: kstage's node and pod Stages, built in).
    #[arg(long = "stages", short = 's', num_args = 1..)]
    stages: Vec<PathBuf>,
    /// Objects to create at start (YAML files or folders).
    #[arg(long = "load", num_args = 1..)]
    load: Vec<PathBuf>,
    /// Stop after this long (default: run until Ctrl-C).
    #[arg(long = "for", value_parser = super::duration::parse_std_duration)]
    run_for: Option<Duration>,
    /// Also install the StagePlugin CRD and take plugins from StagePlugin resources
    /// (as `kstage run --plugin-crds`): `kubectl apply` one and it is fetched, checked,
    /// hot-swapped and its status written, canary rollouts included.
    #[arg(long)]
    plugin_crds: bool,
    /// Where to serve `/livez`, `/readyz`, `/healthz` and `/metrics` (HOST:PORT; port 0
    /// picks a free one, printed at start), or `off`.
    #[arg(long, default_value = "127.0.0.1:0", value_parser = crate::serve::parse_serve)]
    serve: crate::serve::ServeAddr,
    /// How the engine runs.
    #[command(flatten)]
    engine: EngineArgs,
}

/// A replica's lease identity when none is given.
fn default_identity() -> String {
    ["POD_NAME", "HOSTNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| format!("kstage-{}", std::process::id()))
}

/// The plugins of a `--config` file, if any.
struct Plugins {
    deciders: crate::decide::Deciders,
    loaded: Option<Arc<crate::plugin::PluginSet>>,
    /// The `--config` file, if any (a set for StagePlugin resources alone has none).
    file: Option<PathBuf>,
}

impl Plugins {
    /// The `--config` file's plugins; with `resources` (`--plugin-crds`) a set even
    /// without a file, for the StagePlugin resources to join.
    fn load(
        path: Option<&std::path::Path>,
        resources: bool,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Self> {
        let config = match path {
            Some(path) => crate::plugin::config::PluginConfig::read(path)
                .with_context(|| format!("cannot read {}", path.display()))?,
            None if resources => crate::plugin::config::PluginConfig::default(),
            None => {
                return Ok(Self {
                    deciders: crate::decide::Deciders::default(),
                    loaded: None,
                    file: None,
                });
            }
        };
        let (set, startup) = super::plugin::load_set(config, clock, None)?;
        tracing::info!("{startup}");
        Ok(Self {
            deciders: set.deciders(),
            loaded: Some(set),
            file: path.map(ToOwned::to_owned),
        })
    }

    /// The cluster resources played besides the objects.
    fn resources(&self, stages: bool, plugins: bool, replica: String) -> crate::daemon::Resources {
        crate::daemon::Resources {
            stages: stages.then(|| self.stage_resources()),
            plugins: match (&self.loaded, plugins) {
                (Some(set), true) => Some(crate::daemon::plugins::PluginResources {
                    set: set.clone(),
                    cache: crate::plugin::fetch::cache_dir(),
                    replica,
                    status_interval: crate::daemon::plugins::STATUS_INTERVAL,
                }),
                _ => None,
            },
        }
    }

    /// Stage resources played live, with the plugin names they may bind.
    fn stage_resources(&self) -> crate::daemon::StageResources {
        match &self.loaded {
            None => crate::daemon::StageResources::without_plugins(),
            Some(set) => {
                let set = set.clone();
                crate::daemon::StageResources {
                    known_plugin: Arc::new(move |name| set.plugin(name).is_some()),
                }
            }
        }
    }

    /// Hot-swap from now on (call inside the runtime): plugin files by a folder watch,
    /// the whole config on SIGHUP; when a selector changed, objects are matched again.
    fn watch(
        &self,
        engine: &Arc<crate::engine::Engine<KubeCluster>>,
    ) -> anyhow::Result<Option<crate::plugin::watch::Watcher>> {
        let (Some(set), Some(path)) = (&self.loaded, &self.file) else {
            return Ok(None);
        };
        let on_reload = {
            let engine = engine.clone();
            let runtime = tokio::runtime::Handle::current();
            move |report: &crate::plugin::set::Reload| {
                for name in &report.swapped {
                    tracing::info!(plugin = %name, "plugin swapped");
                }
                for (name, why) in &report.rejected {
                    tracing::warn!(plugin = %name, "plugin update rejected, the old version keeps serving: {why}");
                }
                if report.selectors_changed {
                    let engine = engine.clone();
                    runtime.spawn(async move {
                        let stages = (*engine.stages()).clone();
                        let _ = engine.set_stages(stages);
                    });
                }
            }
        };
        crate::plugin::watch::reload_on_sighup(set.clone(), path.clone(), on_reload.clone())?;
        crate::plugin::watch::settle_rollouts(
            set.clone(),
            crate::plugin::watch::ROLLOUT_CHECK,
            on_reload.clone(),
        );
        // Plugins pulled by tag (now, or after a SIGHUP) follow their tag.
        crate::plugin::watch::poll_registries(
            set.clone(),
            crate::plugin::fetch::cache_dir(),
            on_reload.clone(),
        );
        let watcher = crate::plugin::watch::watch(set.clone(), on_reload)?;
        tracing::info!(config = %path.display(), "plugins: hot swap on (plugin files watched, registry tags followed, config read again on SIGHUP)");
        Ok(Some(watcher))
    }
}

/// kstage's own node and pod Stages, used by `kstage up` without `--stages`.
const BUILTIN_STAGES: &[&str] = &[
    include_str!("../../examples/stages/node/node-ready.yaml"),
    include_str!("../../examples/stages/node/node-heartbeat.yaml"),
    include_str!("../../examples/stages/pod/pod-scheduled.yaml"),
    include_str!("../../examples/stages/pod/pod-running.yaml"),
    include_str!("../../examples/stages/pod/pod-succeeded.yaml"),
    include_str!("../../examples/stages/pod/pod-removed.yaml"),
];

/// The Stage CustomResourceDefinition `kstage up` installs.
const STAGE_CRD: &str = include_str!("../../deploy/crds/stages.kwok.x-k8s.io.yaml");

/// The StagePlugin CustomResourceDefinition `kstage up --plugin-crds` installs.
const STAGE_PLUGIN_CRD: &str = include_str!("../../deploy/crds/stageplugins.kstage.dev.yaml");

/// The template environment of real runs (wall clock; pod IPs from `cidr` when given:
/// `V4[,V6]`, dual-stack with both; sprig's `env` reads `env_vars` only).
pub(super) fn template_env(
    clock: Arc<dyn Clock>,
    cidr: Option<&str>,
    env_vars: &[String],
) -> anyhow::Result<Arc<StageEnv>> {
    Ok(Arc::new(stage_env(clock, cidr, env_vars)?))
}

/// [`template_env`], not yet shared.
fn stage_env(
    clock: Arc<dyn Clock>,
    cidr: Option<&str>,
    env_vars: &[String],
) -> anyhow::Result<StageEnv> {
    let env = StageEnv::new(clock, chrono::Utc::now(), env!("CARGO_PKG_VERSION"))
        .with_env_vars(env_vars.iter().cloned());
    let env = match cidr {
        None => env,
        Some(cidr) => {
            let (v4, v6) = cidr.split_once(',').unwrap_or((cidr, ""));
            let env = env.with_dual_stack(!v6.trim().is_empty());
            let env = if v6.trim().is_empty() {
                env.with_pod_cidrs(v4.trim(), "fd00:10:244::/64")
            } else {
                env.with_pod_cidrs(v4.trim(), v6.trim())
            };
            env.with_context(|| format!("--cidr {cidr:?}"))?
        }
    };
    Ok(env)
}

/// The Stages of `paths`; none without paths.
pub(super) fn stage_files(paths: &[PathBuf], renderer: &Renderer) -> anyhow::Result<Vec<Stage>> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    super::load_stage_list(paths, renderer)
}

/// The client configuration of a kubeconfig file, or inferred (in-cluster, then
/// `$KUBECONFIG` or `~/.kube/config`) without one.
pub(super) async fn client_config(path: Option<&std::path::Path>) -> anyhow::Result<kube::Config> {
    match path {
        Some(path) => {
            // Checked first: kube-rs' own error for a missing file names the path quoted
            // twice and the OS error twice.
            std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
            let k = Kubeconfig::read_from(path).map_err(|e| {
                anyhow::anyhow!(
                    "{}: not a kubeconfig: {}",
                    path.display(),
                    super::innermost(&e)
                )
            })?;
            let config =
                kube::Config::from_custom_kubeconfig(k, &KubeConfigOptions::default()).await?;
            Ok(with_user_agent(config))
        }
        None => kube::Config::infer()
            .await
            .map(with_user_agent)
            .context("no cluster configuration (in-cluster or kubeconfig); give --kubeconfig"),
    }
}

/// The `User-Agent` kstage's requests carry, `kstage/VERSION (OS/ARCH)` as client-go's
/// `kubectl/VERSION (OS/ARCH)`: an API server's audit log and metrics tell kstage apart.
pub(super) fn with_user_agent(mut config: kube::Config) -> kube::Config {
    let agent = format!(
        "kstage/{} ({}/{})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    if let Ok(value) = http::HeaderValue::from_str(&agent) {
        config.headers.push((http::header::USER_AGENT, value));
    }
    config
}

/// The client configuration for an embedded API server.
pub(super) async fn embedded_config(server: &ApiServer) -> anyhow::Result<kube::Config> {
    let k = Kubeconfig::from_yaml(&server.kubeconfig())?;
    let config = kube::Config::from_custom_kubeconfig(k, &KubeConfigOptions::default()).await?;
    Ok(with_user_agent(config))
}

fn builtin_stages(renderer: &Renderer) -> anyhow::Result<Vec<Stage>> {
    let mut stages = Vec::new();
    for text in BUILTIN_STAGES {
        let loaded = crate::stage::load::load_str(text, renderer)?;
        anyhow::ensure!(
            loaded.problems.is_empty(),
            "built-in Stages: {:?}",
            loaded.problems
        );
        stages.extend(loaded.stages);
    }
    Ok(stages)
}

fn engine_config(args: &EngineArgs, clock: Arc<dyn Clock>, env: &Arc<StageEnv>) -> EngineConfig {
    EngineConfig {
        workers: args.workers,
        clock,
        seed: rand_seed(),
        observer: Some(env.clone()),
        loop_guard: args.loop_guard,
        ..EngineConfig::default()
    }
}

/// A seed for a real run (weights and jitter need not repeat between runs).
fn rand_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

pub(super) fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    if args.stages.is_empty() && !args.stage_crds {
        anyhow::bail!("nothing to play: give --stages PATH... and/or --stage-crds");
    }
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    // Several replicas: pods get addresses from their node's range only, which
    // node_ipam assigns (the global range would be shared by every replica).
    let env = Arc::new(
        stage_env(
            clock.clone(),
            args.engine.cidr.as_deref(),
            &args.engine.template_env,
        )?
        .with_node_ranges_only(args.node_leases),
    );
    let renderer = Renderer::new(env.clone());
    let files = stage_files(&args.stages, &renderer)?;
    let plugins = Plugins::load(
        args.engine.config.as_deref(),
        args.plugin_crds,
        clock.clone(),
    )?;
    let runtime = super::runtime(args.engine.threads)?;
    runtime.block_on(async {
        let config = client_config(args.kubeconfig.as_deref()).await?;
        let managed = args.managed_nodes()?;
        let objects = args.object_selectors()?;
        let server = config.cluster_url.to_string();
        let mut cluster = KubeCluster::new(config.clone())
            .map_err(|e| anyhow::anyhow!(e.message))?
            .with_managed_nodes(managed)
            .with_object_selectors(objects)
            .with_rate_limit(args.qps, args.burst);
        let mut lease_loop = None;
        let mut held_leases = None;
        if args.node_leases {
            let identity = args.identity.clone().unwrap_or_else(default_identity);
            let (nodes_tx, nodes_rx) = tokio::sync::watch::channel(Default::default());
            cluster.track_managed_nodes(nodes_tx);
            let leases = crate::lease::Leases::new(
                // The engine's client: the Leases' requests count in its metrics too.
                cluster.client().clone(),
                crate::lease::LeaseConfig {
                    identity: identity.clone(),
                    duration: args.lease_duration,
                },
                clock.clone(),
            )
            .with_gate(Arc::new(
                crate::node_ipam::NodeIpam::new(cluster.client().clone(), env.clone())
                    // A round that assigns ranges still renews within a lease duration.
                    .with_budget(args.lease_duration / 4),
            ));
            cluster = cluster.with_held_nodes(leases.held());
            held_leases = Some(leases.held());
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            let stop = async move {
                let _ = stop_rx.await;
            };
            lease_loop = Some((stop_tx, tokio::spawn(leases.run_until(nodes_rx, stop))));
            eprintln!("kstage run: node leases as {identity}");
        }
        let cluster = Arc::new(cluster);
        let n = files.len();
        let daemon = Daemon::start(
            cluster,
            files,
            plugins.resources(
                args.stage_crds,
                args.plugin_crds,
                args.identity.clone().unwrap_or_else(default_identity),
            ),
            renderer,
            engine_config(&args.engine, clock, &env),
            plugins.deciders.clone(),
        );
        let _watcher = plugins.watch(daemon.engine())?;
        let endpoint = serve(args.serve.0, daemon.engine(), &plugins, held_leases).await?;
        if let Some((_, endpoint)) = &endpoint {
            eprintln!(
                "kstage run: serving /livez /readyz /metrics on http://{}",
                endpoint.addr
            );
        }
        eprintln!(
            "kstage run: playing {n} Stage{} from files{} against {server}",
            if n == 1 { "" } else { "s" },
            if args.stage_crds {
                " and the cluster's Stage resources"
            } else {
                ""
            }
        );
        let mut signals = Signals::new()?;
        signals.next().await;
        if let Some((probes, _)) = &endpoint {
            probes.shutting_down();
        }
        let grace = args.engine.shutdown_grace;
        let stopping = async {
            let deadline = tokio::time::Instant::now() + grace;
            let drained = daemon.stop(grace).await;
            if let Some((stop, task)) = lease_loop {
                let _ = stop.send(());
                let _ = tokio::time::timeout_at(deadline, task).await;
            }
            drained
        };
        eprintln!("kstage run: stopping: finishing the Stages being played (a second signal exits at once)");
        stop_or_quit(stopping, &mut signals, grace, "kstage run").await
    })
}

pub(super) fn up(args: UpArgs) -> anyhow::Result<ExitCode> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let env = template_env(
        clock.clone(),
        args.engine.cidr.as_deref(),
        &args.engine.template_env,
    )?;
    let renderer = Renderer::new(env.clone());
    let plugins = Plugins::load(
        args.engine.config.as_deref(),
        args.plugin_crds,
        clock.clone(),
    )?;
    let files = if args.stages.is_empty() {
        builtin_stages(&renderer)?
    } else {
        super::load_stage_list(&args.stages, &renderer)?
    };
    let objects = super::apiserver::objects_to_load(&args.load)?;
    let runtime = super::runtime(args.engine.threads)?;
    runtime.block_on(async {
        let config = Config {
            address: std::net::SocketAddr::from(([127, 0, 0, 1], args.port)),
            ..Config::default()
        };
        let server = ApiServer::start(config)
            .await
            .with_context(|| format!("cannot listen on 127.0.0.1:{}", args.port))?;
        let state = &server.server().state;
        state.create(crate::yaml::to_json(STAGE_CRD)?)?;
        if args.plugin_crds {
            state.create(crate::yaml::to_json(STAGE_PLUGIN_CRD)?)?;
        }
        server
            .write_kubeconfig(&args.kubeconfig)
            .with_context(|| format!("cannot write {}", args.kubeconfig.display()))?;
        let config = embedded_config(&server).await?;
        let cluster = Arc::new(KubeCluster::new(config).map_err(|e| anyhow::anyhow!(e.message))?);
        let daemon = Daemon::start(
            cluster,
            files,
            plugins.resources(true, args.plugin_crds, "kstage-up".to_owned()),
            renderer,
            engine_config(&args.engine, clock, &env),
            plugins.deciders.clone(),
        );
        let _watcher = plugins.watch(daemon.engine())?;
        let endpoint = serve(args.serve.0, daemon.engine(), &plugins, None).await?;
        for object in objects {
            state.create(object).context("cannot load an object")?;
        }
        let k = args.kubeconfig.display();
        eprintln!(
            "kstage up: API server at {} with kstage's Stages playing\n  kubeconfig: {k}\n  try: kubectl --kubeconfig {k} apply -f examples/objects/\n       kubectl --kubeconfig {k} get nodes,pods -A -w",
            server.url()
        );
        if let Some((_, endpoint)) = &endpoint {
            eprintln!("  probes and metrics: http://{}/metrics", endpoint.addr);
        }
        let mut signals = Signals::new()?;
        let until = args.run_for.map(|d| tokio::time::Instant::now() + d);
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        let mut last = String::new();
        loop {
            let run_out = async {
                match until {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = run_out => break,
                () = signals.next() => break,
                _ = tick.tick() => {
                    let line = progress(state);
                    if line != last {
                        eprintln!("  {line}");
                        last = line;
                    }
                }
            }
        }
        eprintln!("  {}", progress(state));
        if let Some((probes, _)) = &endpoint {
            probes.shutting_down();
        }
        let grace = args.engine.shutdown_grace;
        stop_or_quit(daemon.stop(grace), &mut signals, grace, "kstage up").await
    })
}

/// SIGTERM and SIGINT, as one stream.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
        })
    }

    /// The next SIGTERM or SIGINT.
    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// Wait for `stopping` (a graceful stop: whether it ended in time) unless a second
/// signal comes first: exit 0 once stopped, 1 on that signal.
async fn stop_or_quit(
    stopping: impl std::future::Future<Output = bool>,
    signals: &mut Signals,
    grace: Duration,
    who: &str,
) -> anyhow::Result<ExitCode> {
    tokio::select! {
        in_time = stopping => {
            if !in_time {
                eprintln!("{who}: some Stages were still playing after {grace:?} (--shutdown-grace): stopped them");
            }
            Ok(ExitCode::SUCCESS)
        }
        () = signals.next() => {
            eprintln!("{who}: second signal: exiting at once");
            Ok(ExitCode::from(1))
        }
    }
}

/// Serve the probes and metrics of `engine` on `addr` (nothing when `None`).
async fn serve(
    addr: Option<std::net::SocketAddr>,
    engine: &Arc<crate::engine::Engine<KubeCluster>>,
    plugins: &Plugins,
    leases: Option<crate::lease::HeldNodes>,
) -> anyhow::Result<Option<(Arc<crate::serve::Probes>, crate::serve::Endpoint)>> {
    use crate::serve::metrics::{LeaseCollector, PluginCollector};
    let Some(addr) = addr else {
        return Ok(None);
    };
    let rest = engine.cluster().rest_metrics();
    let mut probes = crate::serve::Probes::for_engine(engine.clone(), Vec::new(), Some(rest));
    if let Some(set) = &plugins.loaded {
        probes = probes.with_collector(Box::new(PluginCollector(set.clone())));
    }
    if let Some(held) = leases {
        probes = probes.with_collector(Box::new(LeaseCollector(held)));
    }
    let probes = Arc::new(probes);
    let endpoint = crate::serve::start(addr, probes.clone())
        .await
        .with_context(|| format!("cannot serve on {addr} (--serve)"))?;
    Ok(Some((probes, endpoint)))
}

/// `nodes: 2 (2 Ready), pods: 2 (1 Running, 1 Succeeded)`.
fn progress(state: &crate::apiserver::state::State) -> String {
    let count = |kind: &str, label: &dyn Fn(&Value) -> String| -> String {
        let Some(resource) = state.resource_of("v1", kind) else {
            return String::new();
        };
        let items = state
            .list(&resource, None, None, 0, None, |_| true)
            .map(|l| l.items)
            .unwrap_or_default();
        let mut by: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
        for o in &items {
            *by.entry(label(o)).or_default() += 1;
        }
        let parts: Vec<String> = by.iter().map(|(k, n)| format!("{n} {k}")).collect();
        format!("{} ({})", items.len(), parts.join(", "))
    };
    let node = |o: &Value| {
        let ready = o
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
        if ready { "Ready" } else { "NotReady" }.to_owned()
    };
    let pod = |o: &Value| {
        o.pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("Unknown")
            .to_owned()
    };
    format!(
        "nodes: {}, pods: {}",
        count("Node", &node),
        count("Pod", &pod)
    )
}
