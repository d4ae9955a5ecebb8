//! `kstage run` killed with SIGKILL twenty times while it plays 1,000 pods, and started
//! again each time: every pod reaches Running and no Stage event is recorded twice (the
//! Events are named after what they record, see the README's *Events once*). And the API
//! server restarted under `kstage run` with its state kept (`kstage apiserver --state`),
//! or paused (SIGSTOP) and resumed: nothing is lost, nothing sent twice, and the log has
//! no ERROR line for what was retried.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::process::Spawned;
use crate::remote::{
    apiserver, apiserver_on, client, event_counts, node_ready, pod_running, watch_until,
};

const PODS: usize = 1_000;
const KILLS: usize = 20;

fn run(kubeconfig: &str, stages: &[String]) -> Spawned {
    let mut args = vec![
        "run",
        "--kubeconfig",
        kubeconfig,
        "--serve",
        "off",
        "--log-format",
        "text",
        "--stages",
    ];
    args.extend(stages.iter().map(String::as_str));
    let mut run = Spawned::start(&args);
    assert!(
        run.wait_for(|l| l.starts_with("kstage run: playing")),
        "{}",
        run.said()
    );
    run
}

fn example_stages() -> Vec<String> {
    ["node", "pod"]
        .iter()
        .map(|s| {
            crate::root()
                .join("examples/stages")
                .join(s)
                .display()
                .to_string()
        })
        .collect()
}

fn pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("pod-{i}")},
        "spec": {"nodeName": format!("node-{}", i % 10),
                 "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .expect("pod")
}

async fn create_pods(pods: &Api<Pod>, range: std::ops::Range<usize>) {
    use futures_util::{StreamExt as _, TryStreamExt as _};
    futures_util::stream::iter(range)
        .map(|i| {
            let pods = pods.clone();
            async move {
                pods.create(&PostParams::default(), &pod(i))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await
        .expect("created");
}

async fn create_nodes(nodes: &Api<Node>) {
    for i in 0..10 {
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": format!("node-{i}")}}))
                    .expect("node"),
            )
            .await
            .expect("node");
    }
}

/// `kstage apiserver --state` stopped (SIGTERM) while `kstage run` plays 200 pods, and
/// started again on its port: it serves the same objects with the same certificate
/// authority and token, `kstage run` goes on (its watches, resuming from before the
/// restart, get 410 and list again), 100 pods created after the restart are played too,
/// every pod reaches Running, and no Stage event is recorded twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_restarted_with_its_state_kept_loses_nothing_and_repeats_nothing() {
    const BEFORE: usize = 200;
    const AFTER: usize = 100;
    let dir = crate::scratch("apiserver-restart");
    let state = dir.join("state.json").display().to_string();
    let (mut server, kubeconfig) = apiserver(&dir, &["--state", &state]);
    let text = std::fs::read_to_string(&kubeconfig).expect("kubeconfig");
    let port: u16 = text
        .split("https://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok())
        .expect("the port in the kubeconfig");
    let client = client(&kubeconfig).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_nodes(&nodes).await;
    create_pods(&pods, 0..BEFORE).await;
    let path = kubeconfig.display().to_string();
    let run = run(&path, &example_stages());
    watch_until(pods.clone(), "a quarter of the pods Running", |all| {
        all.values().filter(|p| pod_running(p)).count() >= BEFORE / 4
    })
    .await;

    let pid = rustix::process::Pid::from_child(&server.child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    assert!(
        server.wait_for(|l| l.starts_with("kstage apiserver: state saved to")),
        "{}",
        server.said()
    );
    let status = server.child.wait().expect("exited");
    assert!(status.success(), "{status:?}");
    let (mut server, _) = apiserver_on(&dir, port, &["--state", &state]);
    assert!(
        server
            .seen
            .iter()
            .any(|l| l.contains("objects restored at resourceVersion")),
        "{}",
        server.said()
    );

    // The same client (same CA, same token) goes on; so does kstage run.
    create_pods(&pods, BEFORE..BEFORE + AFTER).await;
    watch_until(pods.clone(), "every pod Running", |all| {
        all.len() == BEFORE + AFTER && all.values().all(pod_running)
    })
    .await;
    watch_until(nodes.clone(), "every node Ready", |all| {
        all.len() == 10 && all.values().all(node_ready)
    })
    .await;
    let mut run = run;
    run.drain();
    assert_no_errors(&run);
    drop(run);
    assert_events_once(&client, BEFORE + AFTER, "across the restart").await;
    let _ = server.child.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_and_restart_twenty_times_sends_no_event_twice() {
    let dir = crate::scratch("restarts");
    let (_server, kubeconfig) = apiserver(&dir, &[]);
    let path = kubeconfig.display().to_string();
    let client = client(&kubeconfig).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for i in 0..10 {
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": format!("node-{i}")}}))
                    .expect("node"),
            )
            .await
            .expect("node");
    }
    let stages: Vec<String> = ["node", "pod"]
        .iter()
        .map(|s| {
            crate::root()
                .join("examples/stages")
                .join(s)
                .display()
                .to_string()
        })
        .collect();
    let mut current = run(&path, &stages);
    // The pods are created while kstage runs, and killed at every 1/KILLS of progress.
    let create = tokio::spawn({
        let pods = pods.clone();
        async move {
            use futures_util::{StreamExt as _, TryStreamExt as _};
            futures_util::stream::iter(0..PODS)
                .map(|i| {
                    let pods = pods.clone();
                    async move {
                        let pod: Pod = serde_json::from_value(json!({
                            "metadata": {"name": format!("pod-{i}")},
                            "spec": {"nodeName": format!("node-{}", i % 10),
                                     "containers": [{"name": "c", "image": "busybox"}]},
                        }))
                        .expect("pod");
                        pods.create(&PostParams::default(), &pod).await.map(|_| ())
                    }
                })
                .buffer_unordered(8)
                .try_collect::<Vec<()>>()
                .await
                .expect("created");
        }
    });
    for kill in 1..=KILLS {
        let at = kill * PODS / (KILLS + 1);
        watch_until(pods.clone(), &format!("{at} pods Running"), |all| {
            all.values().filter(|p| pod_running(p)).count() >= at
        })
        .await;
        current.child.kill().expect("SIGKILL");
        let _ = current.child.wait();
        current = run(&path, &stages);
    }
    create.await.expect("created");
    watch_until(pods.clone(), "every pod Running", |all| {
        all.len() == PODS && all.values().all(pod_running)
    })
    .await;
    drop(current);

    let counts = event_counts(&client, "default").await;
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "events sent twice after {KILLS} SIGKILLs: {twice:?}"
    );
    for reason in ["Scheduled", "Started"] {
        assert_eq!(
            counts.keys().filter(|(_, r)| r == reason).count(),
            PODS,
            "{reason} events"
        );
    }
}

/// No ERROR line in what `kstage run` said: failures it retried are not errors.
fn assert_no_errors(run: &Spawned) {
    let errors: Vec<&String> = run.seen.iter().filter(|l| l.contains("ERROR")).collect();
    assert!(
        errors.is_empty(),
        "ERROR lines for retried failures:\n{}",
        run.said()
    );
}

/// `kstage apiserver` paused (SIGSTOP) for three seconds while `kstage run` plays 300
/// pods, then resumed (SIGCONT): requests made meanwhile wait and go through, every pod
/// reaches Running, no Stage event is recorded twice, and nothing is logged as an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_paused_and_resumed_loses_nothing_and_repeats_nothing() {
    const PAUSED: usize = 300;
    let dir = crate::scratch("apiserver-paused");
    let (server, kubeconfig) = apiserver(&dir, &[]);
    let client = client(&kubeconfig).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_nodes(&nodes).await;
    create_pods(&pods, 0..PAUSED).await;
    let mut run = run(&kubeconfig.display().to_string(), &example_stages());
    watch_until(pods.clone(), "a quarter of the pods Running", |all| {
        all.values().filter(|p| pod_running(p)).count() >= PAUSED / 4
    })
    .await;
    let pid = rustix::process::Pid::from_child(&server.child);
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).expect("SIGSTOP");
    // The length of the fault, not a wait for something to happen.
    std::thread::sleep(std::time::Duration::from_secs(3));
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).expect("SIGCONT");
    watch_until(pods.clone(), "every pod Running", |all| {
        all.len() == PAUSED && all.values().all(pod_running)
    })
    .await;
    run.drain();
    assert_no_errors(&run);
    drop(run);
    assert_events_once(&client, PAUSED, "across the pause").await;
}

/// Every pod got one `Scheduled` and one `Started` Event, none sent twice.
async fn assert_events_once(client: &kube::Client, pods: usize, when: &str) {
    let counts = event_counts(client, "default").await;
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "events sent twice {when}: {twice:?}");
    for reason in ["Scheduled", "Started"] {
        assert_eq!(
            counts.keys().filter(|(_, r)| r == reason).count(),
            pods,
            "{reason} events"
        );
    }
}
