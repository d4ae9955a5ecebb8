//! Plugins through an OCI registry, against a real one: Debian's `docker-registry` (the
//! CNCF distribution registry), one process per test on a free loopback port with its
//! own storage. `kstage plugin push` then a pull that runs; a wrong digest refused; a
//! moved tag hot-swapped (and, with a rollout, analysed first); a registry that goes
//! down leaves the serving version, with the reason in the StagePlugin's status, told
//! once; basic auth through a `kubernetes.io/dockerconfigjson` pull secret; a
//! StagePlugin with a rollout analysing the version its tag moves to.
//!
//! Without `docker-registry` on `PATH` these tests are `ignored`; CI installs it and
//! sets `KSTAGE_REQUIRE_REGISTRY=1`, so there they run or fail (see build.rs).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use kstage::apiserver::state::State;
use kstage::apiserver::{ApiServer, Config};
use kstage::clock::{Clock, SystemClock};
use kstage::cluster::ObjectKey;
use kstage::plugin::config::PluginConfig;
use kstage::plugin::oci::{self, Auth, OciSource};
use kstage::plugin::{PluginSet, Runtime};
use kstage::retry::Decision;

use crate::fixtures::Classify;
use crate::rollout;
use crate::stage_plugins::{self as sp, GROUP};

/// A `docker-registry` process on a loopback port; killed when dropped.
pub struct Registry {
    child: Option<Child>,
    /// `127.0.0.1:PORT`.
    pub host: String,
    config: PathBuf,
}

impl Registry {
    /// A registry storing into a fresh folder; with `users`, basic auth (htpasswd).
    pub fn start(tag: &str, users: &[(&str, &str)]) -> Self {
        let dir = crate::scratch(&format!("oci-{tag}"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let host = format!("127.0.0.1:{port}");
        let mut config = format!(
            "version: 0.1\nlog: {{level: info}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\nhttp: {{addr: \"{host}\"}}\n",
            dir.join("data").display()
        );
        if !users.is_empty() {
            let lines: Vec<String> = users
                .iter()
                .map(|(user, password)| {
                    let hash = bcrypt::hash_with_result(password, 4)
                        .expect("bcrypt")
                        .format_for_version(bcrypt::Version::TwoY);
                    format!("{user}:{hash}")
                })
                .collect();
            let htpasswd = dir.join("htpasswd");
            std::fs::write(&htpasswd, lines.join("\n") + "\n").expect("htpasswd");
            config += &format!(
                "auth:\n  htpasswd: {{realm: kstage, path: {}}}\n",
                htpasswd.display()
            );
        }
        let path = dir.join("config.yml");
        std::fs::write(&path, config).expect("config");
        let mut registry = Self {
            child: None,
            host,
            config: path,
        };
        registry.run();
        registry
    }

    /// Start the process (again), and wait until it listens.
    pub fn run(&mut self) {
        let mut child = Command::new("docker-registry")
            .arg("serve")
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("docker-registry runs (apt-get install docker-registry)");
        let stderr = child.stderr.take().expect("stderr");
        let (listening, told) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("listening on") {
                    let _ = listening.send(Ok(()));
                }
                lines.push(line);
            }
            // Ended before listening: what it said.
            let _ = listening.send(Err(lines.join("\n")));
        });
        match told.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok(())) => {}
            other => panic!("docker-registry did not start: {other:?}"),
        }
        self.child = Some(child);
    }

    /// Kill the process (the storage stays).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `oci://HOST/REPOSITORY`.
    pub fn reference(&self, repository: &str) -> String {
        format!("oci://{}/{repository}", self.host)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `kstage plugin push FILE REFERENCE --plain-http` (with `login` on stdin): the digests
/// it printed, manifest's and component's.
fn push(file: &Path, reference: &str, login: Option<(&str, &str)>) -> (String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kstage"));
    command
        .args(["plugin", "push"])
        .arg(file)
        .args([reference, "--plain-http"])
        .env("DOCKER_CONFIG", file.with_extension("no-docker-config"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some((user, _)) = login {
        command.args(["--username", user, "--password-stdin"]);
    }
    let mut child = command.spawn().expect("kstage runs");
    if let Some((_, password)) = login {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("stdin");
        writeln!(stdin, "{password}").expect("password");
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("kstage ends");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "push failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |name: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in {stdout}"))
            .trim()
            .to_owned()
    };
    (field("manifest digest:"), field("sha256:"))
}

/// A classifier component reporting `version`, written to `dir/NAME.wasm`.
fn component_file(dir: &Path, behaviour: Classify, version: &'static str) -> (PathBuf, Vec<u8>) {
    let bytes = rollout::component(behaviour, version);
    let path = dir.join(format!("{version}.wasm"));
    std::fs::write(&path, &bytes).expect("write");
    (path, bytes)
}

/// The set of a config file's text (pulls into `cache`).
fn load(text: &str, cache: &Path) -> Result<Arc<PluginSet>, String> {
    let config = PluginConfig::parse_with_cache(text, Path::new("."), cache)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    PluginSet::load(Runtime::new().expect("runtime"), config, clock, None)
        .map_err(|e| format!("{e:?}"))
}

fn version(set: &PluginSet, name: &str) -> String {
    set.plugin(name).expect("serving").info().version.clone()
}

#[cfg_attr(
    not(kstage_registry),
    ignore = "needs docker-registry (apt-get install docker-registry)"
)]
#[test]
fn a_pushed_component_is_pulled_by_tag_or_digest_and_runs() {
    let registry = Registry::start("push", &[]);
    let dir = crate::scratch("oci-push-files");
    let (file, bytes) = component_file(&dir, Classify::Policy, "1.0.0");
    let (manifest, sha256) = push(&file, &registry.reference("kstage/retry:1"), None);
    assert_eq!(sha256, kstage::plugin::runtime::digest(&bytes));
    assert!(
        manifest.starts_with("sha256:") && manifest.len() == 71,
        "{manifest}"
    );

    let cache = dir.join("cache");
    let text = format!(
        "plugins:\n- {{name: retry, oci: '{}/kstage/retry:1', plainHttp: true}}\nbindings: {{classifier: retry}}\n",
        registry.host
    );
    let set = load(&text, &cache).expect("pulled and loaded");
    assert_eq!(version(&set, "retry"), "1.0.0");
    assert_eq!(
        rollout::classify(&set, 429),
        Decision::RetryAfter(Duration::from_millis(1234)),
        "it runs"
    );
    assert!(
        cache.join(format!("{sha256}.wasm")).is_file(),
        "cached by digest"
    );
    let spec = &set.file_plugins()[0];
    assert_eq!(spec.sha256.as_deref(), Some(sha256.as_str()));

    // By manifest digest, pinned: no poll; the same component.
    let text = format!(
        "plugins:\n- {{name: retry, oci: 'oci://{}/kstage/retry@{manifest}', plainHttp: true, sha256: '{sha256}'}}\n",
        registry.host
    );
    let set = load(&text, &dir.join("cache-2")).expect("pulled by digest");
    assert_eq!(version(&set, "retry"), "1.0.0");
    assert_eq!(
        set.file_plugins()[0].oci.as_ref().map(|o| o.poll),
        Some(None)
    );

    // Not there, and not a Wasm artifact: named as such.
    let missing = format!(
        "plugins:\n- {{name: retry, oci: '{}/kstage/retry:9', plainHttp: true}}\n",
        registry.host
    );
    let error = load(&missing, &cache).expect_err("no such tag");
    assert!(error.contains("not found in the registry"), "{error}");
}

/// A manifest that is not a Wasm artifact (an image config), pushed with the client.
async fn push_image(host: &str) -> String {
    use oci_client::client::{ClientConfig, ClientProtocol, Config as Blob, ImageLayer};
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    });
    let reference: oci_client::Reference =
        format!("{host}/kstage/image:1").parse().expect("reference");
    let layer = ImageLayer::new(
        b"not wasm".to_vec(),
        "application/vnd.oci.image.layer.v1.tar".to_owned(),
        None,
    );
    client
        .push(
            &reference,
            &[layer],
            Blob::oci_v1(b"{}".to_vec(), None),
            &oci_client::secrets::RegistryAuth::Anonymous,
            None,
        )
        .await
        .expect("pushed");
    format!("{host}/kstage/image:1")
}

#[cfg_attr(
    not(kstage_registry),
    ignore = "needs docker-registry (apt-get install docker-registry)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_digest_or_a_foreign_artifact_is_refused() {
    let registry = Registry::start("refused", &[]);
    let dir = crate::scratch("oci-refused-files");
    let (file, _) = component_file(&dir, Classify::Policy, "1.0.0");
    let (_, sha256) = push(&file, &registry.reference("kstage/retry:1"), None);
    let wrong = "0".repeat(64);
    let source = OciSource::parse(
        &format!("{}/kstage/retry:1", registry.host),
        Some(wrong.clone()),
        true,
        None,
    )
    .expect("source");
    let error = oci::pull(&source, &Auth::Anonymous, &dir.join("cache"))
        .await
        .expect_err("the pin differs");
    assert_eq!(error.reason(), "DigestMismatch");
    let text = error.to_string();
    assert!(
        text.contains(&wrong) && text.contains(&sha256),
        "both digests named: {text}"
    );
    assert!(
        !dir.join("cache").join(format!("{sha256}.wasm")).exists(),
        "nothing cached"
    );

    let image = push_image(&registry.host).await;
    let source = OciSource::parse(&image, None, true, None).expect("source");
    let error = oci::pull(&source, &Auth::Anonymous, &dir.join("cache"))
        .await
        .expect_err("not wasm");
    assert_eq!(error.reason(), "NotWasmArtifact", "{error}");
    assert!(
        error.to_string().contains(oci::CONFIG_MEDIA_TYPE),
        "{error}"
    );
}

#[cfg_attr(
    not(kstage_registry),
    ignore = "needs docker-registry (apt-get install docker-registry)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_tag_is_swapped_in_or_analysed_first() {
    let mut registry = Registry::start("moved", &[]);
    let dir = crate::scratch("oci-moved-files");
    let (v1, _) = component_file(&dir, Classify::Policy, "1.0.0");
    let (v2, _) = component_file(&dir, Classify::Refresh, "2.0.0");
    let (v3, _) = component_file(&dir, Classify::Policy, "3.0.0");
    push(&v1, &registry.reference("kstage/swap:stable"), None);
    push(&v1, &registry.reference("kstage/canary:stable"), None);
    let text = format!(
        "plugins:
- {{name: swap, oci: '{host}/kstage/swap:stable', plainHttp: true, pollInterval: 50ms}}
- name: canary
  oci: '{host}/kstage/canary:stable'
  plainHttp: true
  pollInterval: 50ms
  rollout: {{canary: 50, analysis: {{duration: 1h, minCalls: 1000}}}}
bindings: {{classifier: swap}}
",
        host = registry.host
    );
    let cache = dir.join("cache");
    let set = load(&text, &cache).expect("loaded");
    let (_task, mut polls) =
        kstage::plugin::watch::poll_registries(set.clone(), cache.clone(), |_| {});
    // Enough rounds for every plugin to be polled twice (each round polls the due ones).
    let rounds = async |polls: &mut tokio::sync::watch::Receiver<u64>, n: u64| {
        let target = *polls.borrow_and_update() + n;
        tokio::time::timeout(Duration::from_secs(30), polls.wait_for(|p| *p >= target))
            .await
            .expect("polled")
            .expect("polling");
    };
    // Checked after every round.
    let until = async |polls: &mut tokio::sync::watch::Receiver<u64>,
                       what: &str,
                       done: &dyn Fn() -> bool| {
        tokio::time::timeout(Duration::from_secs(30), polls.wait_for(|_| done()))
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
            .expect("polling");
    };
    // Unmoved: polled, nothing changes.
    rounds(&mut polls, 4).await;
    assert_eq!(version(&set, "swap"), "1.0.0");
    assert_eq!(
        set.metrics()
            .swaps
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );

    // Both tags move: `swap` serves version 2 at once, `canary` analyses version 2.
    push(&v2, &registry.reference("kstage/swap:stable"), None);
    push(&v2, &registry.reference("kstage/canary:stable"), None);
    until(&mut polls, "both moved", &|| {
        version(&set, "swap") == "2.0.0" && set.rollouts().len() == 1
    })
    .await;
    assert_eq!(
        rollout::classify(&set, 500),
        Decision::Refresh,
        "version 2 decides"
    );
    assert_eq!(version(&set, "canary"), "1.0.0", "serving while analysed");
    let [report] = set.rollouts().try_into().expect("one rollout");
    assert_eq!(report.plugin, "canary");
    assert_eq!(report.canary.info().version, "2.0.0");

    // The registry goes down: polls fail, version 2 keeps serving.
    registry.stop();
    rounds(&mut polls, 4).await;
    assert_eq!(version(&set, "swap"), "2.0.0");
    assert_eq!(rollout::classify(&set, 500), Decision::Refresh);
    // Back, with the tag moved again: taken.
    registry.run();
    push(&v3, &registry.reference("kstage/swap:stable"), None);
    until(&mut polls, "version 3", &|| {
        version(&set, "swap") == "3.0.0"
    })
    .await;
}

/// A `kubernetes.io/dockerconfigjson` Secret `kstage/NAME` for `host`.
fn pull_secret(name: &str, host: &str, user: &str, password: &str) -> Value {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let config = json!({"auths": {host: {"auth": auth}}}).to_string();
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": name, "namespace": "default"},
        "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(config)},
    })
}

fn from_registry(name: &str, reference: &str, secret: &str) -> Value {
    json!({
        "apiVersion": GROUP, "kind": "StagePlugin",
        "metadata": {"name": name},
        "spec": {
            "source": {"oci": {
                "reference": reference, "plainHttp": true, "pollInterval": "50ms",
                "pullSecret": {"namespace": "default", "name": secret},
            }},
            "bind": if name == "chaos" { json!(["classifier"]) } else { json!([]) },
        },
    })
}

/// The StagePlugin `name` as stored.
fn get(state: &State, name: &str) -> Value {
    let key = ObjectKey {
        api_version: GROUP.into(),
        kind: "StagePlugin".into(),
        namespace: String::new(),
        name: name.into(),
    };
    (*state.get(&key).expect("object")).clone()
}

/// Wait until both StagePlugins satisfy `each`.
async fn wait_until(state: &State, what: &str, each: impl Fn(&Value) -> bool) {
    crate::e2e::wait_for(
        state,
        GROUP,
        "StagePlugin",
        what,
        |all| all.len() == 2,
        each,
    )
    .await;
}

/// How many Warning Events of `reason` are recorded for the StagePlugin `name`.
fn warnings(state: &State, name: &str, reason: &str) -> usize {
    let events = state.resource_of("v1", "Event").expect("events");
    state
        .list(&events, None, None, 0, None, |_| true)
        .expect("list")
        .items
        .iter()
        .filter(|e| {
            e["type"] == "Warning" && e["reason"] == reason && e["involvedObject"]["name"] == name
        })
        .count()
}

#[cfg_attr(
    not(kstage_registry),
    ignore = "needs docker-registry (apt-get install docker-registry)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_plugin_follows_its_tag_through_basic_auth_and_an_outage() {
    let mut registry = Registry::start("stage-plugin", &[("ann", "s3cret")]);
    let dir = crate::scratch("oci-stage-plugin-files");
    let (v1, _) = component_file(&dir, Classify::Policy, "1.0.0");
    let (v2, _) = component_file(&dir, Classify::Policy, "2.0.0");
    let login = Some(("ann", "s3cret"));
    let (_, sha1) = push(&v1, &registry.reference("kstage/chaos:live"), login);

    let server = ApiServer::start(Config::default()).await.expect("server");
    let state = &server.server().state;
    sp::install_crd(state);
    let r = sp::replica(&server).await;
    let reference = format!("{}/kstage/chaos:live", registry.host);
    state
        .create(pull_secret("regcred", &registry.host, "ann", "s3cret"))
        .expect("Secret");
    state
        .create(pull_secret("wrong", &registry.host, "ann", "guess"))
        .expect("Secret");
    state
        .create(from_registry("chaos", &reference, "regcred"))
        .expect("StagePlugin");
    state
        .create(from_registry("intruder", &reference, "wrong"))
        .expect("StagePlugin");
    let get = |name: &str| get(state, name);
    wait_until(state, "chaos serving, intruder refused", |o| {
        sp::condition(o, "Ready").is_some() && o.pointer("/status/observedGeneration").is_some()
    })
    .await;
    let chaos = get("chaos");
    assert!(sp::says(&chaos, "Ready", "True", "Serving"), "{chaos}");
    assert_eq!(chaos["status"]["digest"], sha1.as_str());
    let intruder = get("intruder");
    assert!(
        sp::says(&intruder, "Fetched", "False", "AuthRefused"),
        "{intruder}"
    );
    let message = sp::condition(&intruder, "Fetched").expect("Fetched")["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("pull secret default/wrong"), "{message}");
    assert!(r.set.plugin("intruder").is_none());

    // The tag moves: version 2 serves.
    let (_, sha2) = push(&v2, &registry.reference("kstage/chaos:live"), login);
    wait_until(state, "version 2", |o| {
        o["metadata"]["name"] != "chaos" || o["status"]["digest"] == sha2.as_str()
    })
    .await;
    assert_eq!(sp::serving(&r.set).as_deref(), Some("2.0.0"));

    // The registry goes down: version 2 keeps serving, the status says why, once.
    registry.stop();
    wait_until(state, "unreachable", |o| {
        o["metadata"]["name"] != "chaos" || sp::says(o, "Fetched", "False", "RegistryUnreachable")
    })
    .await;
    let chaos = get("chaos");
    assert_eq!(chaos["status"]["version"], "2.0.0", "{chaos}");
    let ready = sp::condition(&chaos, "Ready").expect("Ready");
    assert!(
        ready["message"]
            .as_str()
            .is_some_and(|m| m.contains("unreachable") && m.contains("keeps serving")),
        "{ready}"
    );
    // Polls go on (their status unchanged, not written); still one Warning Event.
    let mut polls = r.daemon.plugin_polls();
    let target = *polls.borrow_and_update() + 5;
    tokio::time::timeout(Duration::from_secs(30), polls.wait_for(|n| *n >= target))
        .await
        .expect("polled")
        .expect("polling");
    assert_eq!(warnings(state, "chaos", "RegistryUnreachable"), 1);
    assert_eq!(sp::serving(&r.set).as_deref(), Some("2.0.0"));
    assert_eq!(
        rollout::classify(&r.set, 429),
        Decision::RetryAfter(Duration::from_millis(1234))
    );
    r.daemon.shutdown();
}

#[cfg_attr(
    not(kstage_registry),
    ignore = "needs docker-registry (apt-get install docker-registry)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_plugin_analyses_the_version_its_tag_moves_to() {
    let registry = Registry::start("stage-plugin-rollout", &[]);
    let dir = crate::scratch("oci-stage-plugin-rollout-files");
    let (v1, _) = component_file(&dir, Classify::Policy, "1.0.0");
    let (v2, _) = component_file(&dir, Classify::TrapOn503, "2.0.0");
    let (_, sha1) = push(&v1, &registry.reference("kstage/chaos:live"), None);
    let server = ApiServer::start(Config::default()).await.expect("server");
    let state = &server.server().state;
    sp::install_crd(state);
    let r = sp::replica(&server).await;
    let mut plugin = json!({
        "apiVersion": GROUP, "kind": "StagePlugin",
        "metadata": {"name": "chaos"},
        "spec": {
            "source": {"oci": {
                "reference": format!("{}/kstage/chaos:live", registry.host),
                "plainHttp": true, "pollInterval": "50ms",
            }},
            "bind": ["classifier"],
        },
    });
    plugin["spec"]["rollout"] =
        json!({"canary": 50, "analysis": {"minCalls": 10, "maxErrorRate": 0.1, "duration": "1h"}});
    state.create(plugin).expect("StagePlugin");
    let one = |what: &'static str, done: fn(&Value) -> bool| {
        crate::e2e::wait_for(
            state,
            GROUP,
            "StagePlugin",
            what,
            |all| all.len() == 1,
            done,
        )
    };
    one("version 1", |o| sp::says(o, "Ready", "True", "Serving")).await;
    assert_eq!(get(state, "chaos")["status"]["digest"], sha1.as_str());

    // The tag moves to a version that traps on 503: analysed, then rolled back.
    let (_, sha2) = push(&v2, &registry.reference("kstage/chaos:live"), None);
    let mut polls = r.daemon.plugin_polls();
    tokio::time::timeout(
        Duration::from_secs(30),
        polls.wait_for(|_| r.set.rollouts().len() == 1),
    )
    .await
    .expect("analysing")
    .expect("polling");
    one("analysing", |o| {
        o.pointer("/status/rollout/phase").and_then(Value::as_str) == Some("Analysing")
    })
    .await;
    assert_eq!(
        get(state, "chaos")["status"]["rollout"]["digest"],
        sha2.as_str()
    );
    assert_eq!(sp::serving(&r.set).as_deref(), Some("1.0.0"));
    let canary = r.set.rollouts()[0].canary.clone();
    let before = rollout::calls(&canary);
    while rollout::calls(&canary) - before < 10 {
        rollout::classify(&r.set, 503);
    }
    one("rolled back", |o| {
        o.pointer("/status/rollout/phase").and_then(Value::as_str) == Some("RolledBack")
            && sp::says(o, "Ready", "False", "RolledBack")
    })
    .await;
    // The tag still names version 2: polled on, not analysed again.
    let target = *polls.borrow_and_update() + 5;
    tokio::time::timeout(Duration::from_secs(30), polls.wait_for(|n| *n >= target))
        .await
        .expect("polled")
        .expect("polling");
    assert_eq!(sp::serving(&r.set).as_deref(), Some("1.0.0"));
    assert!(
        r.set
            .rollouts()
            .iter()
            .all(|report| matches!(report.phase, kstage::plugin::rollout::Phase::Settled(_))),
        "no new analysis"
    );
    assert_eq!(get(state, "chaos")["status"]["version"], "1.0.0");
    r.daemon.shutdown();
}
