//! Benchmarks against an API server (the embedded one or a cluster's), driven by
//! `kstage bench`.
//!
//! [`raw_patch`] measures the server's plain PATCH throughput: `concurrency` workers
//! each send status patches one after another, over kube-rs (the client stack the
//! engine uses), to `objects` pods created for the purpose, for a fixed time. Every
//! patch changes the pod (a counter in `status.message`), so none is a no-op. It is
//! the yardstick the engine's own throughput is compared with.
//!
//! [`lifecycle`] creates nodes and pods and times them until Ready and Running while the
//! engine plays Stages against the same server, then deletes the pods and times them
//! until gone.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

mod observed;
pub mod scrape;
pub mod soak;
use observed::Observed;

/// The benchmark's pods in `namespace`, read as [`Observed`].
fn pods_api(client: Client, namespace: &str) -> Api<Observed> {
    Api::namespaced_with(client, namespace, &ApiResource::erase::<Pod>(&()))
}

/// The nodes, read as [`Observed`].
fn nodes_api(client: Client) -> Api<Observed> {
    Api::all_with(client, &ApiResource::erase::<Node>(&()))
}

/// What [`raw_patch`] does.
#[derive(Debug, Clone)]
pub struct RawPatch {
    /// Concurrent requests.
    pub concurrency: usize,
    /// How long to send.
    pub duration: Duration,
    /// Pods to patch (round robin).
    pub objects: usize,
    /// Namespace of the pods (must exist).
    pub namespace: String,
    /// Hold open, while patching, the two pod watches a lifecycle run has (the engine's,
    /// parsing every object whole, and the load generator's): the server then sends a
    /// watch event to each per patch, as it does for each of the engine's writes.
    pub watched: bool,
    /// The status each patch writes (an object; `None`: `status.message` alone). Every
    /// patch still sets its own `message`, so each one changes the pod.
    pub status: Option<serde_json::Map<String, serde_json::Value>>,
}

/// What [`raw_patch`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct RawPatchReport {
    /// Patches answered with success.
    pub ok: u64,
    /// Patches that failed.
    pub errors: u64,
    /// Wall time of the sending phase.
    pub elapsed: Duration,
    /// Median latency.
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
}

impl RawPatchReport {
    /// Successful patches per second.
    pub fn per_second(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A request of the setup or clean-up failed.
    #[error("{what}: {source}")]
    Setup {
        /// What was being done.
        what: String,
        /// The client's error.
        source: kube::Error,
    },
    /// The watches of a watched raw PATCH run did not start.
    #[error("{0}")]
    Watch(String),
}

fn setup(what: impl Into<String>) -> impl FnOnce(kube::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Setup { what, source }
}

/// The name of the `i`th benchmark pod.
fn pod_name(i: usize) -> String {
    format!("kstage-bench-{i}")
}

/// Run the raw PATCH benchmark; `progress` is called about once a second with the
/// patches done so far.
pub async fn raw_patch(
    client: Client,
    spec: &RawPatch,
    progress: impl Fn(u64, Duration) + Send + Sync + 'static,
) -> Result<RawPatchReport, BenchError> {
    let pods = pods_api(client, &spec.namespace);
    let objects = spec.objects.max(1);
    let post = PostParams::default();
    for i in 0..objects {
        let pod = Observed::to_send(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name(i), "labels": {"app.kubernetes.io/managed-by": "kstage-bench"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }));
        idempotent(|| pods.create(&post, &pod), |e| api_code(e) == Some(409))
            .await
            .map_err(setup(format!("creating pod {}", pod_name(i))))?;
    }
    let watches = if spec.watched {
        watch_like_a_lifecycle(&pods).await?
    } else {
        Vec::new()
    };
    let sent = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + spec.duration;
    let mut workers = Vec::new();
    for _ in 0..spec.concurrency.max(1) {
        let pods = pods.clone();
        let sent = sent.clone();
        let errors = errors.clone();
        let status = spec.status.clone().unwrap_or_default();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let params = PatchParams::default();
            while Instant::now() < deadline {
                let n = sent.fetch_add(1, Ordering::Relaxed);
                let name = pod_name(n as usize % objects);
                let mut status = status.clone();
                status.insert("message".into(), format!("patch {n}").into());
                let patch = Patch::Strategic(json!({ "status": status }));
                let t = Instant::now();
                match pods.patch_status(&name, &params, &patch).await {
                    Ok(_) => latencies.push(t.elapsed()),
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            latencies
        }));
    }
    let ticker = {
        let sent = sent.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                progress(sent.load(Ordering::Relaxed), start.elapsed());
            }
        })
    };
    let mut latencies = Vec::new();
    for w in workers {
        latencies.extend(w.await.unwrap_or_default());
    }
    let elapsed = start.elapsed();
    ticker.abort();
    for w in watches {
        w.abort();
    }
    let ok = latencies.len() as u64;
    let [p50, p99] = quantiles(latencies, [0.5, 0.99]);
    let report = RawPatchReport {
        ok,
        errors: errors.load(Ordering::Relaxed),
        elapsed,
        p50,
        p99,
    };
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    delete_all(&pods, &now, spec.concurrency).await?;
    Ok(report)
}

/// What [`lifecycle`] does: the engine must be playing node and pod Stages against the
/// same cluster (the CLI runs it in this process).
#[derive(Debug, Clone)]
pub struct Lifecycle {
    /// Nodes to create.
    pub nodes: usize,
    /// Pods to create, bound to the nodes round robin.
    pub pods: usize,
    /// Concurrent create and delete requests.
    pub concurrency: usize,
    /// Give up after this long.
    pub timeout: Duration,
    /// Namespace of the pods (must exist).
    pub namespace: String,
    /// Bind the pods round robin to the first this many nodes (0: all of them); KWOK's
    /// benchmark puts every pod on one node.
    pub pod_nodes: usize,
}

/// What [`lifecycle`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct LifecycleReport {
    /// From the first creation until every node was Ready.
    pub nodes_ready: Duration,
    /// From the first creation until every pod was Running.
    pub pods_running: Duration,
    /// Median time from a pod's creation to its Running.
    pub p50: Duration,
    /// 99th percentile of the same.
    pub p99: Duration,
    /// From the deletion request until every pod was gone.
    pub deleted: Duration,
    /// From the first creation until `start_engine` was called (after the last
    /// creation).
    pub engine_started: Duration,
}

/// What a [`lifecycle`] run had measured when it stopped: every phase it finished.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    /// From the first creation until every node was Ready.
    pub nodes_ready: Option<Duration>,
    /// From the first creation until every pod was Running, and the p50 and p99 from a
    /// pod's creation to its Running.
    pub pods_running: Option<(Duration, Duration, Duration)>,
    /// From the deletion request until every pod was gone.
    pub deleted: Option<Duration>,
    /// When the engine was started, from the first creation.
    pub engine_started: Option<Duration>,
}

impl From<&LifecycleReport> for Measured {
    fn from(r: &LifecycleReport) -> Self {
        Self {
            nodes_ready: Some(r.nodes_ready),
            pods_running: Some((r.pods_running, r.p50, r.p99)),
            deleted: Some(r.deleted),
            engine_started: Some(r.engine_started),
        }
    }
}

/// A [`lifecycle`] run that did not finish: why, and what it measured before.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct LifecycleFailure {
    /// The phases finished before the failure.
    pub measured: Measured,
    /// Why it stopped.
    pub error: LifecycleError,
}

/// Why [`lifecycle`] failed.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// Setup failed.
    #[error(transparent)]
    Setup(#[from] BenchError),
    /// Not done in time.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, String),
}

/// Start the pod watches of a lifecycle run on the namespace of `pods` (one parsing
/// every object whole as the engine does, one reading what the load generator times),
/// once both have listed.
async fn watch_like_a_lifecycle(
    pods: &Api<Observed>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, BenchError> {
    use futures_util::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, watcher};
    let (listed, mut ready) = tokio::sync::mpsc::channel::<()>(2);
    fn drain<
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    >(
        api: Api<K>,
        listed: tokio::sync::mpsc::Sender<()>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(
            watcher(api, watcher::Config::default().labels(BENCH_LABEL))
                .default_backoff()
                .for_each(move |event| {
                    if matches!(event, Ok(watcher::Event::InitDone)) {
                        let _ = listed.try_send(());
                    }
                    async {}
                }),
        )
    }
    let resource = ApiResource::erase::<Pod>(&());
    let whole: Api<crate::cluster::raw::RawObject> = Api::namespaced_with(
        pods.clone().into_client(),
        pods.namespace().unwrap_or("default"),
        &resource,
    );
    let watches = vec![drain(whole, listed.clone()), drain(pods.clone(), listed)];
    for _ in 0..watches.len() {
        let started = tokio::time::timeout(Duration::from_secs(30), ready.recv()).await;
        if !matches!(started, Ok(Some(()))) {
            for w in &watches {
                w.abort();
            }
            return Err(BenchError::Watch(
                "the pod watches did not list within 30 s".into(),
            ));
        }
    }
    Ok(watches)
}

/// The label selector of every object a benchmark creates.
const BENCH_LABEL: &str = "app.kubernetes.io/managed-by=kstage-bench";

/// What the watchers saw.
#[derive(Debug, Default)]
struct Seen {
    /// How many nodes make "all Ready".
    nodes: usize,
    /// When the last of them became Ready.
    nodes_ready_at: Option<Instant>,
    ready_nodes: std::collections::HashSet<String>,
    running: HashMap<String, Instant>,
    pods: std::collections::HashSet<String>,
}

/// Create nodes and pods, and time them until Ready and Running, then delete the pods
/// and time them until gone. `start_engine` is called once every object is created (to
/// measure an engine that starts with all of them waiting; a no-op when it runs
/// already). `progress` gets a line about once a second.
pub async fn lifecycle(
    client: Client,
    spec: &Lifecycle,
    start_engine: impl FnOnce() + Send,
    progress: impl Fn(&str) + Send + Sync + 'static,
) -> Result<LifecycleReport, LifecycleFailure> {
    use futures_util::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, watcher};

    let seen = Arc::new(std::sync::Mutex::new(Seen {
        nodes: spec.nodes,
        ..Seen::default()
    }));
    let changed = Arc::new(tokio::sync::Notify::new());
    let nodes_api = nodes_api(client.clone());
    let pods_api = pods_api(client.clone(), &spec.namespace);
    let selector = watcher::Config::default().labels(BENCH_LABEL);
    let node_watch = {
        let (seen, changed) = (seen.clone(), changed.clone());
        watcher(nodes_api.clone(), selector.clone())
            .default_backoff()
            .applied_objects()
            .for_each(move |n| {
                if let Ok(n) = n
                    && n.ready
                {
                    let mut s = seen
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    s.ready_nodes.insert(n.name().to_owned());
                    if s.ready_nodes.len() >= s.nodes && s.nodes_ready_at.is_none() {
                        s.nodes_ready_at = Some(Instant::now());
                    }
                    drop(s);
                    changed.notify_waiters();
                }
                async {}
            })
    };
    let pod_watch = {
        let (seen, changed) = (seen.clone(), changed.clone());
        watcher(pods_api.clone(), selector)
            .default_backoff()
            .for_each(move |event| {
                let mut s = seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match event {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                        let name = p.name().to_owned();
                        if p.running {
                            s.running.entry(name.clone()).or_insert_with(Instant::now);
                        }
                        s.pods.insert(name);
                    }
                    Ok(watcher::Event::Delete(p)) => {
                        s.pods.remove(p.name());
                    }
                    _ => {}
                }
                drop(s);
                changed.notify_waiters();
                async {}
            })
    };
    let watches = [tokio::spawn(node_watch), tokio::spawn(pod_watch)];
    let mut measured = Measured::default();
    let result = lifecycle_run(
        &nodes_api,
        &pods_api,
        spec,
        (&seen, &changed),
        start_engine,
        &progress,
        &mut measured,
    )
    .await
    .map_err(|error| LifecycleFailure { measured, error });
    for w in watches {
        w.abort();
    }
    // Clean up what is left, whatever happened.
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let _ = delete_all(&pods_api, &now, spec.concurrency).await;
    let _ = delete_all(&nodes_api, &now, spec.concurrency).await;
    result
}

async fn lifecycle_run(
    nodes_api: &Api<Observed>,
    pods_api: &Api<Observed>,
    spec: &Lifecycle,
    (seen, changed): (&std::sync::Mutex<Seen>, &tokio::sync::Notify),
    start_engine: impl FnOnce(),
    progress: &(impl Fn(&str) + Send + Sync),
    measured: &mut Measured,
) -> Result<LifecycleReport, LifecycleError> {
    let snapshot = |f: &dyn Fn(&Seen) -> usize| {
        f(&seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    };
    let start = Instant::now();
    let deadline = start + spec.timeout;
    let label = json!({"app.kubernetes.io/managed-by": "kstage-bench"});
    let node_names: Vec<String> = (0..spec.nodes)
        .map(|i| format!("kstage-bench-node-{i}"))
        .collect();
    let nodes = node_names.iter().map(|name| {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": label}})
    });
    create_all(nodes_api, nodes, spec.concurrency, |_| {}).await?;
    let created: std::sync::Mutex<HashMap<String, Instant>> = std::sync::Mutex::default();
    let pods = (0..spec.pods).map(|i| {
        let bound = match spec.pod_nodes {
            0 => node_names.len(),
            n => n.min(node_names.len()),
        };
        let node = &node_names[i % bound.max(1)];
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("kstage-bench-pod-{i}"), "labels": label},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}})
    });
    create_all(pods_api, pods, spec.concurrency, |name| {
        created
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(name.to_owned(), Instant::now());
    })
    .await?;
    let engine_started = start.elapsed();
    measured.engine_started = Some(engine_started);
    start_engine();
    let mut last_report = Instant::now();
    loop {
        measured.nodes_ready = seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .nodes_ready_at
            .map(|t| t.saturating_duration_since(start));
        let ready = snapshot(&|s| s.ready_nodes.len());
        let running = snapshot(&|s| s.running.len());
        if last_report.elapsed() >= Duration::from_secs(1) {
            progress(&format!(
                "nodes Ready {ready}/{}, pods Running {running}/{}",
                spec.nodes, spec.pods
            ));
            last_report = Instant::now();
        }
        if ready >= spec.nodes && running >= spec.pods {
            break;
        }
        if Instant::now() >= deadline {
            return Err(LifecycleError::Timeout(
                spec.timeout,
                format!(
                    "{ready}/{} nodes Ready, {running}/{} pods Running",
                    spec.nodes, spec.pods
                ),
            ));
        }
        let _ = tokio::time::timeout(Duration::from_millis(250), changed.notified()).await;
    }
    let pods_running = {
        let s = seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.running
            .values()
            .max()
            .map_or_else(|| start.elapsed(), |t| t.saturating_duration_since(start))
    };
    let nodes_ready = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .nodes_ready_at
        .map(|t| t.saturating_duration_since(start));
    let latencies: Vec<Duration> = {
        let s = seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let created = created
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.running
            .iter()
            .filter_map(|(name, at)| created.get(name).map(|c| at.saturating_duration_since(*c)))
            .collect()
    };
    let [p50, p99] = quantiles(latencies, [0.5, 0.99]);
    measured.nodes_ready = Some(nodes_ready.unwrap_or(pods_running));
    measured.pods_running = Some((pods_running, p50, p99));
    // Delete the pods as a user would (gracefully: the engine finishes them off).
    let deleting = Instant::now();
    let deadline = deleting + spec.timeout;
    delete_all(pods_api, &DeleteParams::default(), spec.concurrency).await?;
    loop {
        let left = snapshot(&|s| s.pods.len());
        if left == 0 {
            break;
        }
        if last_report.elapsed() >= Duration::from_secs(1) {
            progress(&format!("pods left {left}/{}", spec.pods));
            last_report = Instant::now();
        }
        if Instant::now() >= deadline {
            return Err(LifecycleError::Timeout(
                spec.timeout,
                format!("{left} pods still there"),
            ));
        }
        let _ = tokio::time::timeout(Duration::from_millis(250), changed.notified()).await;
    }
    Ok(LifecycleReport {
        nodes_ready: nodes_ready.unwrap_or(pods_running),
        pods_running,
        p50,
        p99,
        deleted: deleting.elapsed(),
        engine_started,
    })
}

/// The `qs` quantiles of `samples` (zero when there are none).
fn quantiles<const N: usize>(mut samples: Vec<Duration>, qs: [f64; N]) -> [Duration; N] {
    samples.sort_unstable();
    qs.map(|q| {
        let i = ((samples.len() as f64 * q) as usize).min(samples.len().saturating_sub(1));
        samples.get(i).copied().unwrap_or_default()
    })
}

/// Create `objects` with `concurrency` requests in flight; `sending` is told each name
/// just before its request goes.
async fn create_all(
    api: &Api<Observed>,
    objects: impl Iterator<Item = serde_json::Value>,
    concurrency: usize,
    sending: impl Fn(&str),
) -> Result<(), BenchError> {
    use futures_util::StreamExt as _;
    let sending = &sending;
    let results: Vec<Result<(), BenchError>> = futures_util::stream::iter(objects)
        .map(|body| async move {
            let object = Observed::to_send(body);
            let name = object.name().to_owned();
            sending(&name);
            let post = PostParams::default();
            idempotent(|| api.create(&post, &object), |e| api_code(e) == Some(409))
                .await
                .map(drop)
                .map_err(setup(format!("creating {name}")))
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    results.into_iter().collect()
}

/// Whether `e` is a transport failure (the connection reset, closed before the answer,
/// timed out) rather than an answer of the server.
fn transport_error(e: &kube::Error) -> bool {
    matches!(
        e,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_)
    )
}

/// Attempts of an idempotent request before a transport error is given up on.
const ATTEMPTS: u32 = 5;

/// Send an idempotent request, again after a transport error (up to [`ATTEMPTS`] times,
/// 100 ms, 200 ms, ... apart). `already` says whether an API error of a retried attempt
/// means an earlier attempt did it (a create's 409, a delete's 404): then it is success.
async fn idempotent<T, F>(
    mut send: impl FnMut() -> F,
    already: impl Fn(&kube::Error) -> bool,
) -> Result<Option<T>, kube::Error>
where
    F: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 1;
    loop {
        match send().await {
            Ok(t) => return Ok(Some(t)),
            Err(e) if attempt > 1 && already(&e) => return Ok(None),
            Err(e) if transport_error(&e) && attempt < ATTEMPTS => {
                tokio::time::sleep(Duration::from_millis(100 << (attempt - 1))).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Delete every object of `api` labelled as the benchmark's, one request per object
/// with `concurrency` in flight (a real server ends one `deletecollection` of many
/// thousands of objects with its request timeout). Gone already is fine.
async fn delete_all<K>(
    api: &Api<K>,
    params: &DeleteParams,
    concurrency: usize,
) -> Result<(), BenchError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use futures_util::StreamExt as _;
    let mut names = Vec::new();
    let mut list = ListParams::default().labels(BENCH_LABEL).limit(500);
    loop {
        // A list has no "done already": `None` never comes.
        let Some(page) = idempotent(|| api.list_metadata(&list), |_| false)
            .await
            .map_err(setup("listing the benchmark objects"))?
        else {
            break;
        };
        names.extend(page.items.into_iter().filter_map(|o| o.metadata.name));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => list = list.continue_token(&token),
            _ => break,
        }
    }
    let results: Vec<Result<(), BenchError>> = futures_util::stream::iter(names)
        .map(|name| async move {
            match idempotent(|| api.delete(&name, params), |e| api_code(e) == Some(404)).await {
                Ok(_) => Ok(()),
                Err(e) if api_code(&e) == Some(404) => Ok(()),
                Err(e) => Err(setup(format!("deleting {name}"))(e)),
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    results.into_iter().collect()
}

/// The failure plugin benchmarks classify (`kstage plugin bench`, `benches/plugin.rs`):
/// a 503 on the third attempt of a pod's `pod-ready` step.
pub fn sample_failure(object: &serde_json::Value) -> crate::retry::Failure<'_> {
    crate::retry::Failure {
        kind: crate::retry::FailureKind::Http,
        status: Some(503),
        reason: Some("ServiceUnavailable"),
        message: "the server is currently unable to handle the request",
        retry_after: None,
        stage: "pod-ready",
        step: 1,
        attempt: 2,
        object,
        binding: None,
    }
}

/// The 10 ms ticks in which a count grew (an engine's write count: the time it spent
/// writing, without its start, the initial list or the waits between a benchmark's
/// phases), as [`growing_time`] sampled them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Growth {
    /// The count before the first tick.
    first: u64,
    /// Each tick in which it grew: when, and the count then.
    ticks: Vec<(tokio::time::Instant, u64)>,
}

/// The sampling period of [`growing_time`].
const TICK: Duration = Duration::from_millis(10);

impl Growth {
    /// How much the count grew, in how many ticks' time, over the ticks before `until`
    /// (all with `None`).
    pub fn until(&self, until: Option<tokio::time::Instant>) -> (u64, Duration) {
        let ticks = self
            .ticks
            .iter()
            .take_while(|(at, _)| until.is_none_or(|u| *at <= u));
        let (n, last) = ticks.fold((0u32, self.first), |(n, _), (_, count)| (n + 1, *count));
        (last - self.first, TICK * n)
    }

    /// How much the count grew, in how many ticks' time, over the ticks after `from`.
    pub fn after(&self, from: tokio::time::Instant) -> (u64, Duration) {
        let (all, all_time) = self.until(None);
        let (before, before_time) = self.until(Some(from));
        (all - before, all_time.saturating_sub(before_time))
    }
}

/// Sample `count` every 10 ms until `stop` is set.
pub async fn growing_time(count: impl Fn() -> u64, stop: &std::sync::atomic::AtomicBool) -> Growth {
    let mut tick = tokio::time::interval(TICK);
    let first = count();
    let mut growth = Growth {
        first,
        ticks: Vec::new(),
    };
    let mut last = first;
    while !stop.load(std::sync::atomic::Ordering::Acquire) {
        tick.tick().await;
        let now = count();
        if now > last {
            growth.ticks.push((tokio::time::Instant::now(), now));
            last = now;
        }
    }
    growth
}

pub use crate::proc::{Process, peak_rss_bytes, process_cpu};

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use super::*;

    /// A count that grows for 50 ms, pauses 100 ms, then grows 30 ms more: 80 ms of
    /// growing time, the pause left out.
    #[tokio::test(start_paused = true)]
    async fn growing_time_counts_only_the_ticks_with_growth() {
        let count = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let drive = async {
            // Half a tick off the sampler's ticks, so no increment races a sample.
            tokio::time::sleep(Duration::from_millis(5)).await;
            for pause in [false, false, false, false, false, true, false, false, false] {
                tokio::time::sleep(Duration::from_millis(if pause { 100 } else { 10 })).await;
                if !pause {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
            stop.store(true, Ordering::Release);
        };
        let start = tokio::time::Instant::now();
        let (_, growth) =
            tokio::join!(drive, growing_time(|| count.load(Ordering::Relaxed), &stop));
        let (grew, active) = growth.until(None);
        assert_eq!(grew, 8);
        assert!(
            (Duration::from_millis(70)..=Duration::from_millis(90)).contains(&active),
            "{active:?}"
        );
        // Split in the pause: the first five increments before it, three after.
        let pause = start + Duration::from_millis(100);
        let (before, before_time) = growth.until(Some(pause));
        assert_eq!(before, 5);
        assert!(
            (Duration::from_millis(40)..=Duration::from_millis(60)).contains(&before_time),
            "{before_time:?}"
        );
        assert_eq!(growth.after(pause), (3, active - before_time));
    }
}
