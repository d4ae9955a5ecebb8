//! Every line a job logs carries its Stage, object, attempt and step, also after an
//! await: the job's future is instrumented, not entered once. A test binary of its own:
//! tracing keeps global state (which callsites are enabled, the highest level any
//! subscriber wants), which the engine tests running beside it in one process would
//! share with the subscriber this test installs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use kstage::clock::{Clock, TokioClock};
use kstage::cluster::faults::{Fault, FaultSpec, Faults, Verb};
use kstage::cluster::memory::MemoryCluster;
use kstage::engine::{Engine, EngineConfig};
use kstage::stage::StageSet;
use kstage::template::{Renderer, StageEnv};
use serde_json::json;

/// What the subscriber writes.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lines").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("lines")).into_owned()
    }
}

/// The error logged when a step's 422 drops the job is written after the request that
/// failed, and carries the job's and the step's fields.
#[tokio::test(start_paused = true)]
async fn a_line_logged_after_an_await_carries_the_jobs_fields() {
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .finish();
    // The runtime of this test has one thread: the engine's tasks run on it.
    let _guard = tracing::subscriber::set_default(subscriber);

    let start: DateTime<Utc> = "2025-01-01T00:00:00Z".parse().expect("time");
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new(start));
    let cluster = Arc::new(MemoryCluster::new(
        clock.clone(),
        Faults::new(FaultSpec::none(), 1),
    ));
    let renderer = Renderer::new(Arc::new(StageEnv::new(clock.clone(), start, "test")));
    let set = std::path::PathBuf::from(env!("KSTAGE_KWOK_DIR")).join("stage/pod/general");
    let loaded = kstage::stage::load::load(&[set], &renderer).expect("corpus readable");
    let config = EngineConfig {
        clock,
        ..EngineConfig::default()
    };
    let engine = Engine::new(cluster.clone(), StageSet::new(loaded.stages), config);
    engine.start();
    cluster.faults().script(
        Verb::Patch,
        [Fault::Status {
            code: 422,
            retry_after: None,
        }],
    );
    cluster
        .insert(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"nodeName": "node-0", "containers": [{"name": "app", "image": "app:1"}]},
        }))
        .expect("created");
    for _ in 0..600 {
        if lines.text().contains("dropping the job") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let text = lines.text();
    let line = text
        .lines()
        .find(|l| l.contains("dropping the job"))
        .unwrap_or_else(|| panic!("no line dropping the job in:\n{text}"));
    assert!(
        line.contains("job{stage=pod-create object=Pod default/p attempt=0}:step{step=1}"),
        "{line}"
    );
    engine.shutdown();
}
