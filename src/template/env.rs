//! What a template sees of the world: time, version, node identity and IP addresses.
//!
//! KWOK's template functions (`Now`, `NodeIPWith`, `PodIPWith`, ...) read the clock and the
//! controller's IP pools. Here they go through a [`TemplateEnv`], so rendering is a pure
//! function of the object and the env:
//! - [`StageEnv`] is deterministic: a [`Clock`] for `Now`, a fixed start time and version,
//!   and IPs handed out in order, stable per node and per pod;
//! - [`GoldenEnv`] returns KWOK's golden-test placeholders (`<Now>`,
//!   `<PodIPWith("node", false, "", "pod-create", "")>`), so KWOK's golden files can be
//!   reproduced exactly.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::clock::Clock;
use crate::go::{go_quote, go_rfc3339_nano};
pub use crate::ipam::CidrError;
use crate::ipam::{Ipam, PodId};

/// Everything non-deterministic a template function sees.
///
/// Text results are what the template prints. IP functions return `Err(reason)` when no
/// address can be given (the template then fails with that reason).
pub trait TemplateEnv: Send + Sync + 'static {
    /// `Now`: the current time, formatted as Go's `time.RFC3339Nano`.
    fn now(&self) -> String;
    /// `StartTime`: when the controller started, formatted as `Now`.
    fn start_time(&self) -> String;
    /// `Version`: the controller's version (templates print `kwok-{{ Version }}`).
    fn version(&self) -> String;
    /// `NodeName`: the controller's own node name (empty means none).
    fn node_name(&self) -> String;
    /// `NodePort`: the kubelet port; KWOK returns an integer, placeholders a string.
    fn node_port(&self) -> serde_json::Value;
    /// `NodeIP`: the controller's own IP.
    fn node_ip(&self) -> Result<String, String>;
    /// `PodIP`: a fresh pod IP.
    fn pod_ip(&self) -> Result<String, String>;
    /// `NodeIPWith nodeName`: the IP of a node.
    fn node_ip_with(&self, node_name: &str) -> Result<String, String>;
    /// `NodeIPsWith nodeName`: the IPs of a node (IPv4 then IPv6 when dual-stack).
    fn node_ips_with(&self, node_name: &str) -> Result<Vec<String>, String>;
    /// `PodIPWith nodeName hostNetwork uid name namespace`: the IP of a pod.
    fn pod_ip_with(&self, pod: &PodIpRequest<'_>) -> Result<String, String>;
    /// `PodIPsWith nodeName hostNetwork uid name namespace`: the IPs of a pod.
    fn pod_ips_with(&self, pod: &PodIpRequest<'_>) -> Result<Vec<String>, String>;
    /// The current time, for sprig's date functions (`now`, `date`, `ago`, certificates).
    fn now_time(&self) -> DateTime<Utc>;
    /// Fills `buf` with random bytes, for sprig's `rand*`, `uuidv4`, `shuffle`, keys,
    /// salts and IVs.
    fn random_bytes(&self, buf: &mut [u8]);
    /// The environment variable `name` as sprig's `env` and `expandenv` see it: only the
    /// variables the daemon was told to expose; `None` (unset) for any other.
    fn env_var(&self, _name: &str) -> Option<String> {
        None
    }
    /// Whether sprig's non-deterministic functions print KWOK golden placeholders
    /// (`<uuidv4>`, `<randAlpha(5)>`, `<now>`) instead of values.
    fn golden(&self) -> bool {
        false
    }
}

impl PodIpRequest<'_> {
    /// Who the pod is, to keep its address.
    fn id(&self) -> PodId<'_> {
        PodId {
            uid: self.uid,
            namespace: self.namespace,
            name: self.name,
        }
    }
}

/// The arguments of `PodIPWith` and `PodIPsWith`, in KWOK's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PodIpRequest<'a> {
    /// `.spec.nodeName`.
    pub node_name: &'a str,
    /// `.spec.hostNetwork`: the pod uses its node's IPs.
    pub host_network: bool,
    /// `.metadata.uid`.
    pub uid: &'a str,
    /// `.metadata.name`.
    pub name: &'a str,
    /// `.metadata.namespace`.
    pub namespace: &'a str,
}

/// KWOK's golden-test placeholders: every non-deterministic function prints its name and,
/// Go `%#v`-formatted, its arguments (`<NodeIPWith("node")>`); the list functions give
/// `["<0 of NAME(ARGS)>", "<1 of NAME(ARGS)>"]`. `StartTime`, which KWOK's harness leaves
/// real, is `<StartTime>` here. sprig's functions do the same (`<uuidv4>`,
/// `<randAlphaNum(8)>`, `<now>`); the date functions read `<now>` as KWOK's golden clock,
/// [`GOLDEN_NOW`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GoldenEnv;

impl GoldenEnv {
    fn pod_args(pod: &PodIpRequest<'_>) -> String {
        format!(
            "{}, {}, {}, {}, {}",
            go_quote(pod.node_name),
            pod.host_network,
            go_quote(pod.uid),
            go_quote(pod.name),
            go_quote(pod.namespace)
        )
    }

    fn pair(call: &str) -> Vec<String> {
        vec![format!("<0 of {call}>"), format!("<1 of {call}>")]
    }
}

/// The time KWOK's golden outputs are computed at: `2006-01-02T15:04:05Z`.
pub const GOLDEN_NOW: i64 = 1_136_214_245;

impl TemplateEnv for GoldenEnv {
    fn now_time(&self) -> DateTime<Utc> {
        DateTime::from_timestamp(GOLDEN_NOW, 0).unwrap_or_default()
    }
    fn random_bytes(&self, buf: &mut [u8]) {
        // Placeholders stand for random values; what little still asks (none of sprig's
        // functions under golden) gets zeros.
        buf.fill(0);
    }
    fn golden(&self) -> bool {
        true
    }
    fn now(&self) -> String {
        "<Now>".to_owned()
    }
    fn start_time(&self) -> String {
        "<StartTime>".to_owned()
    }
    fn version(&self) -> String {
        "<Version>".to_owned()
    }
    fn node_name(&self) -> String {
        "<NodeName>".to_owned()
    }
    fn node_port(&self) -> serde_json::Value {
        serde_json::Value::String("<NodePort>".to_owned())
    }
    fn node_ip(&self) -> Result<String, String> {
        Ok("<NodeIP>".to_owned())
    }
    fn pod_ip(&self) -> Result<String, String> {
        Ok("<PodIP>".to_owned())
    }
    fn node_ip_with(&self, node_name: &str) -> Result<String, String> {
        Ok(format!("<NodeIPWith({})>", go_quote(node_name)))
    }
    fn node_ips_with(&self, node_name: &str) -> Result<Vec<String>, String> {
        Ok(Self::pair(&format!("NodeIPsWith({})", go_quote(node_name))))
    }
    fn pod_ip_with(&self, pod: &PodIpRequest<'_>) -> Result<String, String> {
        Ok(format!("<PodIPWith({})>", Self::pod_args(pod)))
    }
    fn pod_ips_with(&self, pod: &PodIpRequest<'_>) -> Result<Vec<String>, String> {
        Ok(Self::pair(&format!("PodIPsWith({})", Self::pod_args(pod))))
    }
}

/// The environment the templates of Stages run in, in `kstage run`, `up` and `sim` alike:
/// deterministic given its clock.
///
/// `Now` reads the injected [`Clock`] (the wall clock, or `kstage sim`'s virtual one);
/// `StartTime` and `Version` are fixed. `NodeIP`, `NodeName` and `NodePort` are the
/// controller's own (configurable) identity. Node and pod addresses come from the
/// [`Ipam`] (see [`crate::ipam`]); `hostNetwork` pods get their node's addresses. The
/// `*IPsWith` functions give an IPv4 and an IPv6 address (dual-stack), unless
/// [`StageEnv::with_dual_stack`] turns that off. sprig's random functions draw from a
/// ChaCha20 generator, seeded from the system unless [`StageEnv::with_seed`] fixes it;
/// `env` sees only the variables [`StageEnv::with_env_vars`] names.
pub struct StageEnv {
    random: std::sync::Mutex<chacha20::ChaCha20Rng>,
    env_vars: Vec<String>,
    clock: Arc<dyn Clock>,
    start_time: String,
    version: String,
    node_ip: String,
    node_name: String,
    node_port: i64,
    ipam: Ipam,
}

impl std::fmt::Debug for StageEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageEnv")
            .field("clock", &self.clock)
            .field("start_time", &self.start_time)
            .field("version", &self.version)
            .field("node_ip", &self.node_ip)
            .field("node_name", &self.node_name)
            .field("node_port", &self.node_port)
            .field("ipam", &self.ipam)
            .field("env_vars", &self.env_vars)
            .finish_non_exhaustive()
    }
}

impl StageEnv {
    /// An env reading `clock`, started at `start_time`, reporting `version`.
    pub fn new(
        clock: Arc<dyn Clock>,
        start_time: DateTime<Utc>,
        version: impl Into<String>,
    ) -> Self {
        let mut seed = [0u8; 32];
        // Without system randomness, a clock-derived seed still varies between runs.
        if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut seed).is_err() {
            let mut rng = crate::rng::Rng::from_entropy();
            for chunk in seed.chunks_mut(8) {
                chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
            }
        }
        Self {
            random: std::sync::Mutex::new(rand_core::SeedableRng::from_seed(seed)),
            env_vars: Vec::new(),
            clock,
            start_time: go_rfc3339_nano(start_time),
            version: version.into(),
            node_ip: "10.0.0.1".to_owned(),
            node_name: "kwok".to_owned(),
            node_port: 10250,
            ipam: Ipam::default(),
        }
    }

    /// Seeds the random source of sprig's functions: the same seed gives the same
    /// `uuidv4`, `randAlpha`, keys... in the same order (`kstage sim --seed`).
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.random = std::sync::Mutex::new(rand_core::SeedableRng::seed_from_u64(seed));
        self
    }

    /// The environment variables sprig's `env` and `expandenv` may read (none by
    /// default: a Stage must not print the daemon's secrets into an object).
    #[must_use]
    pub fn with_env_vars(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.env_vars = names.into_iter().collect();
        self
    }

    /// The controller's own IP (`NodeIP`; default `10.0.0.1`).
    #[must_use]
    pub fn with_node_ip(mut self, ip: impl Into<String>) -> Self {
        self.node_ip = ip.into();
        self
    }

    /// The controller's own node name (`NodeName`; default `kwok`, empty for none).
    #[must_use]
    pub fn with_node_name(mut self, name: impl Into<String>) -> Self {
        self.node_name = name.into();
        self
    }

    /// The kubelet port (`NodePort`; default 10250).
    #[must_use]
    pub fn with_node_port(mut self, port: i64) -> Self {
        self.node_port = port;
        self
    }

    /// Whether `NodeIPsWith`/`PodIPsWith` give an IPv6 address too (default true).
    #[must_use]
    pub fn with_dual_stack(mut self, dual_stack: bool) -> Self {
        self.ipam = self.ipam.with_dual_stack(dual_stack);
        self
    }

    /// Whether pods may only get addresses from their node's range (several replicas;
    /// see [`Ipam::with_node_ranges_only`]).
    #[must_use]
    pub fn with_node_ranges_only(mut self, only: bool) -> Self {
        self.ipam = self.ipam.with_node_ranges_only(only);
        self
    }

    /// The ranges node addresses come from (IPv4 at most /30, IPv6 at most /126).
    ///
    /// # Errors
    /// A [`CidrError`] when a range does not parse.
    pub fn with_node_cidrs(mut self, v4: &str, v6: &str) -> Result<Self, CidrError> {
        self.ipam = self.ipam.with_node_cidrs(v4, v6)?;
        Ok(self)
    }

    /// The ranges pod addresses come from (IPv4 at most /30, IPv6 at most /126).
    ///
    /// # Errors
    /// A [`CidrError`] when a range does not parse.
    pub fn with_pod_cidrs(mut self, v4: &str, v6: &str) -> Result<Self, CidrError> {
        self.ipam = self.ipam.with_pod_cidrs(v4, v6)?;
        Ok(self)
    }

    /// The clock `Now` reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The address pools.
    pub fn ipam(&self) -> &Ipam {
        &self.ipam
    }

    /// Learns what a watched object means for the address pools (see [`Ipam::observe`]).
    pub fn observe(&self, object: &serde_json::Value) {
        self.ipam.observe(object);
    }

    /// Returns what an object that went away held (see [`Ipam::release`]).
    pub fn release(&self, object: &serde_json::Value) {
        self.ipam.release(object);
    }

    /// Returns a pod's addresses to its range.
    pub fn release_pod(&self, pod: &PodIpRequest<'_>) {
        self.ipam.release_pod(&pod.id());
    }

    /// How many pods hold addresses.
    pub fn leased_pods(&self) -> usize {
        self.ipam.leased_pods()
    }

    /// How many pod ranges are in use besides the global one (nodes' `podCIDRs`).
    pub fn node_ranges(&self) -> usize {
        self.ipam.node_ranges()
    }
}

/// The address pools follow the nodes (their pod ranges) and the pods (their addresses
/// come back when they go).
impl crate::cluster::Observer for StageEnv {
    fn applied(&self, object: &serde_json::Value) {
        self.observe(object);
    }
    fn gone(&self, object: &serde_json::Value) {
        self.release(object);
    }
}

impl TemplateEnv for StageEnv {
    fn now(&self) -> String {
        go_rfc3339_nano(self.clock.now())
    }
    fn now_time(&self) -> DateTime<Utc> {
        self.clock.now()
    }
    fn random_bytes(&self, buf: &mut [u8]) {
        let mut random = self
            .random
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        rand_core::Rng::fill_bytes(&mut *random, buf);
    }
    fn env_var(&self, name: &str) -> Option<String> {
        if self.env_vars.iter().any(|n| n == name) {
            std::env::var(name).ok()
        } else {
            None
        }
    }
    fn start_time(&self) -> String {
        self.start_time.clone()
    }
    fn version(&self) -> String {
        self.version.clone()
    }
    fn node_name(&self) -> String {
        self.node_name.clone()
    }
    fn node_port(&self) -> serde_json::Value {
        serde_json::Value::from(self.node_port)
    }
    fn node_ip(&self) -> Result<String, String> {
        Ok(self.node_ip.clone())
    }
    fn pod_ip(&self) -> Result<String, String> {
        self.ipam.pod_address(None, "")
    }
    fn node_ip_with(&self, node_name: &str) -> Result<String, String> {
        if node_name.is_empty() {
            return self.node_ip();
        }
        self.ipam.node_address(node_name)
    }
    fn node_ips_with(&self, node_name: &str) -> Result<Vec<String>, String> {
        if node_name.is_empty() {
            return Ok(vec![self.node_ip.clone()]);
        }
        self.ipam.node_addresses(node_name)
    }
    fn pod_ip_with(&self, pod: &PodIpRequest<'_>) -> Result<String, String> {
        if pod.host_network {
            return self.node_ip_with(pod.node_name);
        }
        self.ipam.pod_address(Some(&pod.id()), pod.node_name)
    }
    fn pod_ips_with(&self, pod: &PodIpRequest<'_>) -> Result<Vec<String>, String> {
        if pod.host_network {
            return self.node_ips_with(pod.node_name);
        }
        self.ipam.pod_addresses(&pod.id(), pod.node_name)
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeDelta, TimeZone};

    use super::*;
    use crate::clock::ManualClock;

    fn start() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2006, 1, 2, 15, 4, 5)
            .single()
            .expect("valid time")
    }

    fn env() -> (Arc<ManualClock>, StageEnv) {
        let clock = Arc::new(ManualClock::new(start()));
        let env = StageEnv::new(clock.clone(), start(), "v0.7.0");
        (clock, env)
    }

    fn pod<'a>(uid: &'a str, name: &'a str) -> PodIpRequest<'a> {
        PodIpRequest {
            node_name: "node-0",
            host_network: false,
            uid,
            name,
            namespace: "default",
        }
    }

    #[test]
    fn sim_env_reads_the_clock() {
        let (clock, env) = env();
        assert_eq!(env.now(), "2006-01-02T15:04:05Z");
        clock.advance(TimeDelta::milliseconds(250));
        assert_eq!(env.now(), "2006-01-02T15:04:05.25Z");
        assert_eq!(env.start_time(), "2006-01-02T15:04:05Z");
        assert_eq!(env.version(), "v0.7.0");
        assert_eq!(env.node_port(), serde_json::json!(10250));
        assert_eq!(env.node_name(), "kwok");
        assert_eq!(env.node_ip(), Ok("10.0.0.1".to_owned()));
    }

    #[test]
    fn node_ips_are_stable_per_node() {
        let (_, env) = env();
        let a = env.node_ip_with("a").expect("ip");
        let b = env.node_ip_with("b").expect("ip");
        assert_eq!(a, "10.1.0.1");
        assert_eq!(b, "10.1.0.2");
        assert_eq!(env.node_ip_with("a").expect("ip"), a);
        assert_eq!(
            env.node_ips_with("b").expect("ips"),
            vec!["10.1.0.2".to_owned(), "fd00:10:1::2".to_owned()]
        );
        assert_eq!(env.node_ip_with("").expect("ip"), "10.0.0.1");
    }

    #[test]
    fn pod_ips_are_stable_per_pod_and_distinct_across_pods() {
        let (_, env) = env();
        let p1 = env.pod_ip_with(&pod("uid-1", "p1")).expect("ip");
        let p2 = env.pod_ip_with(&pod("uid-2", "p2")).expect("ip");
        assert_ne!(p1, p2);
        assert_eq!(env.pod_ip_with(&pod("uid-1", "p1")).expect("ip"), p1);
        assert_eq!(
            env.pod_ips_with(&pod("uid-1", "p1")).expect("ips"),
            vec![p1.clone(), "fd00:10:244::1".to_owned()]
        );
        // Without a UID a pod is known by namespace/name.
        let p3 = env.pod_ip_with(&pod("", "p3")).expect("ip");
        assert_eq!(env.pod_ip_with(&pod("", "p3")).expect("ip"), p3);
        assert_eq!(
            [p1.as_str(), p2.as_str(), p3.as_str()],
            ["10.244.0.1", "10.244.0.2", "10.244.0.3"]
        );
    }

    #[test]
    fn same_inputs_same_ips_across_envs() {
        let run = || {
            let (_, env) = env();
            let mut out = Vec::new();
            for i in 0..50 {
                let uid = format!("uid-{}", i % 7);
                let node = format!("node-{}", i % 3);
                let req = PodIpRequest {
                    node_name: &node,
                    host_network: i % 5 == 0,
                    uid: &uid,
                    name: "p",
                    namespace: "ns",
                };
                out.push(env.pod_ips_with(&req).expect("ips"));
                out.push(vec![env.node_ip_with(&node).expect("ip")]);
            }
            out
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn host_network_pods_use_node_ips() {
        let (_, env) = env();
        let mut req = pod("uid-1", "p1");
        req.host_network = true;
        assert_eq!(
            env.pod_ip_with(&req).expect("ip"),
            env.node_ip_with("node-0").expect("ip")
        );
        assert_eq!(
            env.pod_ips_with(&req).expect("ips"),
            env.node_ips_with("node-0").expect("ips")
        );
    }

    #[test]
    fn released_pod_ips_are_reused_lowest_first() {
        let (_, env) = env();
        let a = env.pod_ip_with(&pod("a", "a")).expect("ip");
        let _b = env.pod_ip_with(&pod("b", "b")).expect("ip");
        env.release_pod(&pod("a", "a"));
        assert_eq!(env.pod_ip_with(&pod("c", "c")).expect("ip"), a);
    }

    #[test]
    fn exhausted_range_is_an_error() {
        let (_, env) = env();
        let env = env
            .with_pod_cidrs("192.168.0.0/30", "fd00::/64")
            .expect("valid");
        assert_eq!(env.pod_ip_with(&pod("a", "a")).expect("ip"), "192.168.0.1");
        assert_eq!(env.pod_ip_with(&pod("b", "b")).expect("ip"), "192.168.0.2");
        let err = env.pod_ip_with(&pod("c", "c")).expect_err("exhausted");
        assert!(err.contains("exhausted"), "{err}");
        assert_eq!(env.pod_ip().expect_err("exhausted"), err);
    }

    #[test]
    fn single_stack_gives_one_ip() {
        let (_, env) = env();
        let env = env.with_dual_stack(false);
        assert_eq!(env.pod_ips_with(&pod("a", "a")).expect("ips").len(), 1);
        assert_eq!(env.node_ips_with("n").expect("ips").len(), 1);
    }

    #[test]
    fn cidrs_are_validated() {
        let (_, env) = env();
        for (v4, v6) in [
            ("10.0.0.0", "fd00::/64"),
            ("10.0.0.0/31", "fd00::/64"),
            ("10.0.0.0/16", "fd00::/127"),
            ("fd00::/64", "fd00::/64"),
            ("10.0.0.0/16", "10.0.0.0/16"),
            ("10.0.0.0/x", "fd00::/64"),
        ] {
            let (_, e) = self::env();
            assert!(e.with_pod_cidrs(v4, v6).is_err(), "{v4} {v6}");
        }
        let env = env
            .with_node_cidrs("172.16.5.9/16", "fd00:1::77/64")
            .expect("valid");
        assert_eq!(env.node_ip_with("n").expect("ip"), "172.16.0.1");
    }

    #[test]
    fn nodes_pod_cidrs_are_their_pods_ranges() {
        let (_, env) = env();
        let node = |name: &str, spec: serde_json::Value| {
            serde_json::json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name}, "spec": spec})
        };
        let on = |node: &'static str, uid: &'static str| PodIpRequest {
            node_name: node,
            ..pod(uid, uid)
        };
        env.observe(&node(
            "dual",
            serde_json::json!({"podCIDRs": ["fd00:7::/64", "10.7.0.0/24"]}),
        ));
        env.observe(&node("v4", serde_json::json!({"podCIDR": "10.8.0.0/30"})));
        env.observe(&node("bad", serde_json::json!({"podCIDRs": ["nonsense"]})));
        assert_eq!(env.node_ranges(), 2);
        assert_eq!(
            env.pod_ips_with(&on("dual", "a")).expect("ips"),
            vec!["10.7.0.1".to_owned(), "fd00:7::1".to_owned()]
        );
        assert_eq!(
            env.pod_ips_with(&on("v4", "b")).expect("ips"),
            vec!["10.8.0.1".to_owned()]
        );
        assert_eq!(env.pod_ip_with(&on("v4", "c")).expect("ip"), "10.8.0.2");
        let full = env
            .pod_ip_with(&on("v4", "d"))
            .expect_err("a /30 holds two");
        assert!(
            full.contains("exhausted (no free address)") && full.contains("of node v4"),
            "{full}"
        );
        assert_eq!(
            crate::ipam::take_exhausted().as_deref(),
            Some("pod range 10.8.0.0/30 of node v4"),
            "the full range is recorded for the typed error"
        );
        assert_eq!(env.pod_ip_with(&on("bad", "e")).expect("ip"), "10.244.0.1");
        // A node that changes its range keeps its pods' addresses; a deleted node's range
        // is forgotten once its pods are gone.
        env.observe(&node("v4", serde_json::json!({"podCIDR": "10.9.0.0/24"})));
        assert_eq!(env.pod_ip_with(&on("v4", "b")).expect("ip"), "10.8.0.1");
        assert_eq!(env.pod_ip_with(&on("v4", "f")).expect("ip"), "10.9.0.1");
        env.release(&node("dual", serde_json::json!({})));
        env.release_pod(&on("dual", "a"));
        env.release_pod(&on("v4", "b"));
        env.release_pod(&on("v4", "c"));
        assert_eq!(env.node_ranges(), 1, "only 10.9.0.0/24 of node v4 is left");
    }

    #[test]
    fn golden_env_placeholders() {
        let env = GoldenEnv;
        assert_eq!(env.now(), "<Now>");
        assert_eq!(env.version(), "<Version>");
        assert_eq!(env.node_ip().expect("ip"), "<NodeIP>");
        assert_eq!(env.node_port(), serde_json::json!("<NodePort>"));
        assert_eq!(
            env.node_ip_with("node").expect("ip"),
            r#"<NodeIPWith("node")>"#
        );
        assert_eq!(
            env.pod_ip_with(&PodIpRequest {
                node_name: "node",
                host_network: false,
                uid: "",
                name: "pod-create",
                namespace: "",
            })
            .expect("ip"),
            r#"<PodIPWith("node", false, "", "pod-create", "")>"#
        );
        assert_eq!(
            env.node_ips_with("node").expect("ips"),
            vec![
                r#"<0 of NodeIPsWith("node")>"#.to_owned(),
                r#"<1 of NodeIPsWith("node")>"#.to_owned()
            ]
        );
    }

    #[test]
    fn envs_are_send_sync() {
        fn check<T: TemplateEnv>() {}
        check::<StageEnv>();
        check::<GoldenEnv>();
    }
}
