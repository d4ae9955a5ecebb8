//! Benchmarks against an API server (the embedded one or a cluster's), driven by
//! `kstage bench`.
//!
//! [`raw_patch`] measures the server's plain PATCH throughput: `concurrency` workers
//! each send status patches one after another, over kube-rs (the client stack the
//! engine uses), to `objects` pods created for the purpose, for a fixed time. Every
//! patch changes the pod (a counter in `status.message`), so none is a no-op. It is
//! the yardstick the engine's own throughput is compared with.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

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
    let pods: Api<Pod> = Api::namespaced(client, &spec.namespace);
    let objects = spec.objects.max(1);
    for i in 0..objects {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name(i), "labels": {"app.kubernetes.io/managed-by": "kstage-bench"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }))
        .map_err(|e| BenchError::Setup {
            what: "building a pod".into(),
            source: kube::Error::SerdeError(e),
        })?;
        pods.create(&PostParams::default(), &pod)
            .await
            .map_err(setup(format!("creating pod {}", pod_name(i))))?;
    }
    let sent = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + spec.duration;
    let mut workers = Vec::new();
    for _ in 0..spec.concurrency.max(1) {
        let pods = pods.clone();
        let sent = sent.clone();
        let errors = errors.clone();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let params = PatchParams::default();
            while Instant::now() < deadline {
                let n = sent.fetch_add(1, Ordering::Relaxed);
                let name = pod_name(n as usize % objects);
                let patch = Patch::Strategic(json!({"status": {"message": format!("patch {n}")}}));
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
    latencies.sort_unstable();
    let pick = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    let report = RawPatchReport {
        ok: latencies.len() as u64,
        errors: errors.load(Ordering::Relaxed),
        elapsed,
        p50: pick(0.5),
        p99: pick(0.99),
    };
    pods.delete_collection(
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
        &ListParams::default().labels("app.kubernetes.io/managed-by=kstage-bench"),
    )
    .await
    .map_err(setup("deleting the benchmark pods"))?;
    Ok(report)
}
