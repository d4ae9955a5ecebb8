//! The API server out of reach for a while: what the engine logs. A test binary of its
//! own: tracing keeps global state (which callsites are enabled, the highest level any
//! subscriber wants) that the engine tests running beside it in one process would share
//! with the subscriber this test installs (see `job_spans.rs`).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kstage::clock::{Clock, TokioClock};
use kstage::cluster::ObjectKey;
use kstage::cluster::faults::{FaultSpec, Faults};
use kstage::cluster::memory::MemoryCluster;
use kstage::engine::{Engine, EngineConfig};
use kstage::stage::StageSet;
use kstage::template::{Renderer, StageEnv};
use serde_json::{Value, json};

struct World {
    cluster: Arc<MemoryCluster>,
    engine: Arc<Engine<MemoryCluster>>,
}

/// KWOK's `pod/general` Stages playing on an in-memory cluster.
fn world(faults: FaultSpec, workers: usize) -> World {
    let start = DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z")
        .expect("time")
        .with_timezone(&Utc);
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new(start));
    let cluster = Arc::new(MemoryCluster::new(clock.clone(), Faults::new(faults, 11)));
    let renderer = Renderer::new(Arc::new(StageEnv::new(clock.clone(), start, "test")));
    let set = std::path::PathBuf::from(env!("KSTAGE_KWOK_DIR")).join("stage/pod/general");
    let loaded = kstage::stage::load::load(&[set], &renderer).expect("corpus readable");
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let config = EngineConfig {
        workers,
        seed: 5,
        clock,
        ..EngineConfig::default()
    };
    let engine = Engine::new(cluster.clone(), StageSet::new(loaded.stages), config);
    engine.start();
    World { cluster, engine }
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": "node-0", "containers": [{"name": "app", "image": "app:1"}]},
    })
}

fn running(cluster: &MemoryCluster, name: &str) -> bool {
    let key = ObjectKey {
        api_version: "v1".into(),
        kind: "Pod".into(),
        namespace: "default".into(),
        name: name.into(),
    };
    cluster
        .object(&key)
        .is_some_and(|p| p["status"]["phase"] == "Running")
}

/// Let virtual time pass (tokio auto-advances while every task waits).
async fn wait_until(mut done: impl FnMut() -> bool, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done()
}

/// A log written into memory, for the tests that read what the engine logs.
#[derive(Clone, Default)]
struct Log(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn lines(&self) -> Vec<String> {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// The API server out of reach for a while under 20 pods: each failed step is retried
/// (a debug line, not an ERROR), one warning says the server cannot be reached, and one
/// line says when it answers again, for how long it was out and how many objects waited.
#[tokio::test(start_paused = true)]
async fn an_outage_is_two_lines_in_the_log_however_many_steps_fail() {
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let w = world(FaultSpec::none(), 4);
    // Every write refused for 60 virtual seconds (watches go on).
    let refused =
        "create:refused=1,patch:refused=1,apply:refused=1,delete:refused=1,event:refused=1";
    w.cluster.faults().set_spec(refused.parse().expect("spec"));
    for i in 0..20 {
        w.cluster.insert(pod(&format!("pod-{i}"))).expect("created");
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    w.cluster.faults().set_spec(FaultSpec::none());
    let all_running = || (0..20).all(|i| running(&w.cluster, &format!("pod-{i}")));
    assert!(wait_until(all_running, Duration::from_secs(600)).await);
    w.engine.shutdown();
    let lines = log.lines();
    assert!(lines.iter().all(|l| !l.contains("ERROR")), "{lines:#?}");
    let down: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("cannot be reached"))
        .collect();
    let up: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("answers again after"))
        .collect();
    assert_eq!((down.len(), up.len()), (1, 1), "{lines:#?}");
    assert!(up[0].contains("20 objects' steps waited"), "{}", up[0]);
    let lasted: f64 = up[0]
        .split("answers again after ")
        .nth(1)
        .and_then(|rest| rest.split('s').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no duration in {}", up[0]));
    // Refused for 60 s; the first retry after that (1 s, 2 s, ... 32 s apart, +20%)
    // gets through.
    assert!((60.0..=120.0).contains(&lasted), "{lasted}s out");
}
