//! The serving endpoint of a running engine, over real HTTP: probes as kube-apiserver
//! answers them, and `/metrics` that parses as Prometheus text and as OpenMetrics with
//! every family kstage documents.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use kstage::apiserver::{ApiServer, Config};
use kstage::clock::{Clock, SystemClock};
use kstage::cluster::client::KubeCluster;
use kstage::engine::{Engine, EngineConfig};
use kstage::serve::{Check, Probes};

use crate::e2e::{kube_config, stage_set, wait_for};

/// GET `path` with `accept`: the status code and the body.
async fn get(addr: std::net::SocketAddr, method: &str, path: &str, accept: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: kstage\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    (status, body.to_owned())
}

/// Every family `/metrics` documents (`serve::metrics`).
const FAMILIES: &[&str] = &[
    "workqueue_depth",
    "workqueue_adds",
    "workqueue_retries",
    "workqueue_queue_duration_seconds",
    "workqueue_work_duration_seconds",
    "workqueue_unfinished_work_seconds",
    "workqueue_longest_running_processor_seconds",
    "kstage_transitions",
    "kstage_step_duration_seconds",
    "kstage_retries",
    "kstage_dropped_jobs",
    "kstage_noop_patches_skipped",
    "kstage_writes",
    "kstage_events",
    "kstage_stale_jobs",
    "kstage_slowed_objects",
    "kstage_objects_held",
    "kstage_stages",
    "process_cpu_seconds",
    "process_resident_memory_bytes",
    "process_open_fds",
    "rest_client_requests",
    "rest_client_request_duration_seconds",
    "kstage_stage_status",
    "kstage_stage_plugin_status",
    "kstage_plugin_calls",
    "kstage_plugin_call_duration_seconds",
    "kstage_plugin_swaps",
    "kstage_plugin_rollouts",
    "kstage_plugin_rollouts_in_progress",
    "kstage_plugin_fallbacks",
    "kstage_plugin_failures",
    "kstage_node_leases_held",
];

/// A plugin set serving one plugin (a renderer whose validation calls it).
fn one_plugin(tag: &str) -> Arc<kstage::plugin::PluginSet> {
    use crate::fixtures::{Fixture, Render};
    use kstage::plugin::config::{PluginConfig, PluginSpec, Policies};
    use kstage::plugin::{PluginSet, Runtime, Settings};
    let dir = crate::scratch(tag);
    let path = dir.join("flaky.wasm");
    let fixture = Fixture {
        render: Some(Render::TrapOnLong),
        ..Fixture::default()
    };
    std::fs::write(&path, fixture.build()).expect("write plugin");
    let config = PluginConfig {
        plugins: vec![PluginSpec {
            name: "flaky".to_owned(),
            path,
            sha256: None,
            settings: Settings::default(),
            policies: Policies::default(),
            rollout: Default::default(),
            oci: None,
        }],
        bindings: Default::default(),
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    PluginSet::load(Runtime::new().expect("runtime"), config, clock, None).expect("loads")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_and_metrics_of_a_running_engine() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let state = &server.server().state;
    state
        .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0"}}))
        .expect("node");
    let cluster = KubeCluster::new(kube_config(&server).await).expect("cluster");
    let rest = cluster.rest_metrics().clone();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let stages = stage_set(clock.clone(), &["stage/node/fast", "stage/pod/fast"]);
    let config = EngineConfig {
        workers: 2,
        clock,
        ..EngineConfig::default()
    };
    let engine = Engine::new(Arc::new(cluster), stages, config);
    let extra = Check::new("extra", || Err("told to fail".into()));
    let (_leases, held) =
        tokio::sync::watch::channel(std::collections::BTreeSet::from(["n0".to_owned()]));
    let probes = Probes::for_engine(engine.clone(), vec![extra], Some(&rest))
        .with_collector(Box::new(kstage::serve::metrics::PluginCollector(
            one_plugin("serve-probes"),
        )))
        .with_collector(Box::new(kstage::serve::metrics::LeaseCollector(held)));
    let probes = Arc::new(probes);
    let endpoint = kstage::serve::start("127.0.0.1:0".parse().expect("addr"), probes.clone())
        .await
        .expect("serve");
    let addr = endpoint.addr;

    // Before the engine has listed anything it is alive but not ready, and says why.
    assert_eq!(get(addr, "GET", "/livez", "*/*").await, (200, "ok".into()));
    assert_eq!(get(addr, "GET", "/healthz", "*/*").await.0, 200);
    let (code, body) = get(addr, "GET", "/readyz", "*/*").await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains("[-]informer-sync failed: initial list not handled yet: v1/Node, v1/Pod"),
        "{body}"
    );
    assert!(body.contains("[-]extra failed: told to fail"), "{body}");
    assert!(body.ends_with("readyz check failed\n"), "{body}");

    let tasks = engine.start();
    tokio::time::timeout(Duration::from_secs(30), engine.wait_synced())
        .await
        .expect("the initial lists are handled");
    let (code, body) = get(addr, "GET", "/readyz?verbose&exclude=extra", "*/*").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body,
        "[+]ping ok\n[+]runtime ok\n[+]informer-sync ok\n[+]shutdown ok\nreadyz check passed\n"
    );

    // Play something, then read the figures it left.
    wait_for(
        state,
        "v1",
        "Node",
        "the node Ready",
        |n| !n.is_empty(),
        |n: &Value| {
            n["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        },
    )
    .await;
    tokio::time::timeout(Duration::from_secs(30), engine.wait_transitions(1))
        .await
        .expect("the node's Stage recorded");

    let (code, text) = get(addr, "GET", "/metrics", "text/plain").await;
    assert_eq!(code, 200);
    let parsed = openmetrics_parser::prometheus::parse_prometheus(&text)
        .unwrap_or_else(|e| panic!("Prometheus text: {e:?}\n{text}"));
    for family in FAMILIES {
        let name = match *family {
            // Prometheus' text format names a counter by its samples.
            f if text.contains(&format!("# TYPE {f}_total counter")) => format!("{f}_total"),
            f => f.to_owned(),
        };
        assert!(
            parsed.families.contains_key(&name),
            "{name} missing:\n{text}"
        );
    }
    assert!(
        text.contains(
            "kstage_transitions_total{api_version=\"v1\",kind=\"Node\",stage=\"node-initialize\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("kstage_objects_held{api_version=\"v1\",kind=\"Node\"} 1"),
        "{text}"
    );
    assert!(text.contains("kstage_node_leases_held 1"), "{text}");
    // The monitoring overlay's alerts and dashboard select only what is served here.
    crate::deploy::assert_monitoring_uses_only(&text);

    let (code, open) = get(
        addr,
        "GET",
        "/metrics",
        "application/openmetrics-text; version=1.0.0",
    )
    .await;
    assert_eq!(code, 200);
    let parsed = openmetrics_parser::openmetrics::parse_openmetrics(&open)
        .unwrap_or_else(|e| panic!("OpenMetrics: {e:?}\n{open}"));
    for family in FAMILIES {
        assert!(
            parsed.families.contains_key(*family),
            "{family} missing:\n{open}"
        );
    }
    assert!(open.ends_with("# EOF\n"));

    assert_eq!(get(addr, "GET", "/nothing", "*/*").await.0, 404);
    assert_eq!(get(addr, "POST", "/livez", "*/*").await.0, 405);

    // Shutting down: not ready at once, still alive.
    probes.shutting_down();
    let (code, body) = get(addr, "GET", "/readyz?exclude=extra", "*/*").await;
    assert_eq!(code, 500);
    assert!(body.contains("[-]shutdown failed: shutting down"), "{body}");
    assert_eq!(get(addr, "GET", "/livez", "*/*").await.0, 200);
    engine.shutdown();
    for t in tasks {
        t.abort();
    }
}

/// The plugin figures on `/metrics`: calls by outcome with the plugin's version, their
/// latency, and the validation's own calls counted as they happen.
#[test]
fn plugin_calls_are_counted_by_plugin_capability_version_and_outcome() {
    use kstage::serve::metrics::PluginCollector;
    use prometheus_client::registry::Registry;

    let set = one_plugin("serve-plugin");
    let plugin = set.plugin("flaky").expect("serving");
    let version = plugin.info().version.clone();
    let before = plugin
        .stats(kstage::plugin::Capability::Renderer)
        .calls
        .load(std::sync::atomic::Ordering::Relaxed);
    // Two answers, three traps.
    for template in ["{}", "[]", "{\"a\":1}", "long", "longer"] {
        let _ = plugin.render("s", template, &"{}".to_owned());
    }
    let mut registry = Registry::default();
    registry.register_collector(Box::new(PluginCollector(set.clone())));
    let (text, _) = kstage::serve::metrics::encode(&registry, true);
    openmetrics_parser::openmetrics::parse_openmetrics(&text)
        .unwrap_or_else(|e| panic!("OpenMetrics: {e:?}\n{text}"));
    let labels = format!("plugin=\"flaky\",capability=\"renderer\",version=\"{version}\"");
    let ok = format!(
        "kstage_plugin_calls_total{{{labels},outcome=\"ok\"}} {}",
        before + 2
    );
    let error = format!("kstage_plugin_calls_total{{{labels},outcome=\"error\"}} 3");
    assert!(text.contains(&ok), "{ok}\n{text}");
    assert!(text.contains(&error), "{error}\n{text}");
    let count = format!(
        "kstage_plugin_call_duration_seconds_count{{{labels}}} {}",
        before + 5
    );
    assert!(text.contains(&count), "{count}\n{text}");
    assert!(
        text.contains("kstage_plugin_swaps_total{result=\"accepted\"} 0"),
        "{text}"
    );
    assert!(text.contains("kstage_plugin_fallbacks_total 0"), "{text}");
    assert!(
        text.contains("kstage_plugin_rollouts_total{result=\"rolled_back\"} 0")
            && text.contains("kstage_plugin_rollouts_in_progress 0"),
        "{text}"
    );
}
