//! The fault matrix over the embedded API server, one fault class at a time: under each,
//! 20 nodes and 200 pods go through KWOK's node and `pod/general` Stages to Ready and
//! Running, are deleted and gone, no Stage event is recorded twice, and the engine still
//! plays a pod created afterwards. (Faults together: e2e.rs; replicas stopped by SIGTERM
//! with patch conflicts: replicas.rs; a Stage played again by another engine: e2e.rs;
//! plugin faults: plugin.rs and plugin_sim.rs; hostile input: hostile.rs.)

use std::time::Duration;

use kstage::apiserver::{ApiServer, Config};

use crate::e2e::{assert_no_event_twice, lifecycle_through_the_engine};

async fn under(config: Config) {
    let server = ApiServer::start(config).await.expect("server");
    lifecycle_through_the_engine(&server, 20, 200).await;
    let faults = &server.server().faults;
    assert!(
        faults.injected_total() > 0,
        "the fault was injected: {:?}",
        faults.spec().to_string()
    );
    assert_no_event_twice(&server.server().state);
}

fn faults(spec: &str) -> Config {
    Config {
        faults: spec.parse().expect("fault spec"),
        fault_timeout: Duration::from_millis(100),
        watch_close_max: Duration::from_millis(500),
        ..Config::default()
    }
}

/// Connections reset before an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_resets() {
    under(faults("*:reset=0.05")).await;
}

/// Requests that hang, then 504.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts() {
    under(faults("*:timeout=0.03")).await;
}

/// 429 Too Many Requests with a Retry-After.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_requests() {
    under(faults("*:429@1s=0.05")).await;
}

/// 500 Internal Server Error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_errors() {
    under(faults("*:500=0.05")).await;
}

/// 503 Service Unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable() {
    under(faults("*:503=0.05")).await;
}

/// A storm of 409 Conflict on writes: objects read again, steps retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflict_storm() {
    under(faults("patch:409=0.3,delete:409=0.3")).await;
}

/// Every watch closed early: watches resume from their resourceVersion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_drops() {
    under(faults("watch:close=1")).await;
}

/// Watches dropped while the server keeps little history: resuming gets 410 Gone, and
/// the watchers list again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_watch_history() {
    let server = ApiServer::start(Config {
        history_limit: 5,
        ..faults("watch:close=1")
    })
    .await
    .expect("server");
    lifecycle_through_the_engine(&server, 20, 200).await;
    assert_no_event_twice(&server.server().state);
    let gone = server
        .server()
        .expired_watches
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        gone > 0,
        "a watch resumed from an expired resourceVersion got 410 Gone"
    );
}
