//! `kstage run` killed with SIGKILL twenty times while it plays 1,000 pods, and started
//! again each time: every pod reaches Running and no Stage event is recorded twice (the
//! Events are named after what they record, see the README's *Events once*).

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::process::Spawned;
use crate::remote::{apiserver, client, event_counts, pod_running, watch_until};

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
