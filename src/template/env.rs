//! What a template sees of the world: time, version, node identity and IP addresses.
//!
//! KWOK's template functions (`Now`, `NodeIPWith`, `PodIPWith`, ...) read the clock and the
//! controller's IP pools. Here they go through a [`TemplateEnv`], so rendering is a pure
//! function of the object and the env:
//! - [`SimEnv`] is deterministic: a [`Clock`] for `Now`, a fixed start time and version,
//!   and IPs handed out in order, stable per node and per pod;
//! - [`GoldenEnv`] returns KWOK's golden-test placeholders (`<Now>`,
//!   `<PodIPWith("node", false, "", "pod-create", "")>`), so KWOK's golden files can be
//!   reproduced exactly.

use std::collections::{BTreeSet, HashMap};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, Utc};

use super::value::{go_quote, go_rfc3339_nano};
use crate::clock::Clock;

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
/// real, is `<StartTime>` here.
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

impl TemplateEnv for GoldenEnv {
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

/// A CIDR that cannot be used as an address pool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CIDR {cidr:?}: {reason}")]
pub struct CidrError {
    /// The text given.
    pub cidr: String,
    /// What is wrong with it.
    pub reason: String,
}

/// An IPv4 and an IPv6 range that hand out addresses by index: index `i` is the
/// `i + 1`-th host address of each range (the network address is skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pool {
    v4_base: u32,
    v4_prefix: u8,
    v6_base: u128,
    v6_prefix: u8,
}

impl Pool {
    fn parse(v4: &str, v6: &str) -> Result<Self, CidrError> {
        let (v4_base, v4_prefix) = parse_cidr::<Ipv4Addr>(v4, 30)?;
        let (v6_base, v6_prefix) = parse_cidr::<Ipv6Addr>(v6, 126)?;
        Ok(Self {
            v4_base: u32::try_from(v4_base).map_err(|_| CidrError {
                cidr: v4.to_owned(),
                reason: "not an IPv4 range".to_owned(),
            })?,
            v4_prefix,
            v6_base,
            v6_prefix,
        })
    }

    /// How many indexes both ranges can serve (IPv4 loses its broadcast address).
    fn capacity(&self) -> u128 {
        let v4 = (1u128 << (32 - u32::from(self.v4_prefix))) - 2;
        let v6 = 1u128
            .checked_shl(128 - u32::from(self.v6_prefix))
            .map_or(u128::MAX, |n| n - 1);
        v4.min(v6)
    }

    fn v4(&self, index: u64) -> Ipv4Addr {
        let offset = u32::try_from(index).unwrap_or(u32::MAX).saturating_add(1);
        Ipv4Addr::from(self.v4_base.wrapping_add(offset))
    }

    fn v6(&self, index: u64) -> Ipv6Addr {
        Ipv6Addr::from(self.v6_base.wrapping_add(u128::from(index) + 1))
    }

    fn describe(&self) -> String {
        format!(
            "{}/{} and {}/{}",
            Ipv4Addr::from(self.v4_base),
            self.v4_prefix,
            Ipv6Addr::from(self.v6_base),
            self.v6_prefix
        )
    }
}

trait IpText: std::str::FromStr {
    const BITS: u32;
    fn to_bits(&self) -> u128;
}

impl IpText for Ipv4Addr {
    const BITS: u32 = 32;
    fn to_bits(&self) -> u128 {
        u128::from(u32::from(*self))
    }
}

impl IpText for Ipv6Addr {
    const BITS: u32 = 128;
    fn to_bits(&self) -> u128 {
        u128::from(*self)
    }
}

/// `a.b.c.d/n` → (network address, n); host bits are cleared.
fn parse_cidr<A: IpText>(cidr: &str, max_prefix: u8) -> Result<(u128, u8), CidrError> {
    let err = |reason: &str| CidrError {
        cidr: cidr.to_owned(),
        reason: reason.to_owned(),
    };
    let (addr, prefix) = cidr.split_once('/').ok_or_else(|| err("missing /prefix"))?;
    let addr: A = addr.parse().map_err(|_| err("bad address"))?;
    let prefix: u8 = prefix.parse().map_err(|_| err("bad prefix length"))?;
    if prefix > max_prefix {
        return Err(err(&format!("prefix must be at most /{max_prefix}")));
    }
    let host_bits = A::BITS - u32::from(prefix);
    let mask = if host_bits >= 128 {
        0
    } else {
        (u128::MAX << host_bits) & (u128::MAX >> (128 - A::BITS))
    };
    Ok((addr.to_bits() & mask, prefix))
}

/// Who a pod IP belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum PodKey {
    Uid(String),
    Name { namespace: String, name: String },
}

impl PodKey {
    fn of(pod: &PodIpRequest<'_>) -> Option<Self> {
        if !pod.uid.is_empty() {
            Some(Self::Uid(pod.uid.to_owned()))
        } else if !pod.name.is_empty() {
            Some(Self::Name {
                namespace: pod.namespace.to_owned(),
                name: pod.name.to_owned(),
            })
        } else {
            None
        }
    }
}

/// Which index each node and pod holds.
#[derive(Debug, Default)]
struct Leases {
    nodes: HashMap<String, u64>,
    next_node: u64,
    pods: HashMap<PodKey, u64>,
    next_pod: u64,
    free_pods: BTreeSet<u64>,
}

/// A deterministic environment for simulations and tests.
///
/// `Now` reads the injected [`Clock`]; `StartTime` and `Version` are fixed. `NodeIP`,
/// `NodeName` and `NodePort` are the controller's own (configurable) identity. Nodes and
/// pods get addresses in the order they are first asked about, from a node range
/// (default `10.1.0.0/16` + `fd00:10:1::/64`) and a pod range (default `10.244.0.0/16` +
/// `fd00:10:244::/64`): the same node or pod always gets the same address, different ones
/// different addresses. A pod is known by its UID, or by namespace and name when it has
/// none; `hostNetwork` pods get their node's addresses. The `*IPsWith` functions give an
/// IPv4 and an IPv6 address (dual-stack), unless [`SimEnv::with_dual_stack`] turns that off.
pub struct SimEnv {
    clock: Arc<dyn Clock>,
    start_time: String,
    version: String,
    node_ip: String,
    node_name: String,
    node_port: i64,
    dual_stack: bool,
    nodes: Pool,
    pods: Pool,
    leases: Mutex<Leases>,
}

impl std::fmt::Debug for SimEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimEnv")
            .field("clock", &self.clock)
            .field("start_time", &self.start_time)
            .field("version", &self.version)
            .field("node_ip", &self.node_ip)
            .field("node_name", &self.node_name)
            .field("node_port", &self.node_port)
            .field("dual_stack", &self.dual_stack)
            .field("nodes", &self.nodes.describe())
            .field("pods", &self.pods.describe())
            .finish_non_exhaustive()
    }
}

impl SimEnv {
    /// An env reading `clock`, started at `start_time`, reporting `version`.
    pub fn new(
        clock: Arc<dyn Clock>,
        start_time: DateTime<Utc>,
        version: impl Into<String>,
    ) -> Self {
        Self {
            clock,
            start_time: go_rfc3339_nano(start_time),
            version: version.into(),
            node_ip: "10.0.0.1".to_owned(),
            node_name: "kwok".to_owned(),
            node_port: 10250,
            dual_stack: true,
            nodes: Pool {
                v4_base: u32::from(Ipv4Addr::new(10, 1, 0, 0)),
                v4_prefix: 16,
                v6_base: u128::from(Ipv6Addr::new(0xfd00, 0x10, 0x1, 0, 0, 0, 0, 0)),
                v6_prefix: 64,
            },
            pods: Pool {
                v4_base: u32::from(Ipv4Addr::new(10, 244, 0, 0)),
                v4_prefix: 16,
                v6_base: u128::from(Ipv6Addr::new(0xfd00, 0x10, 0x244, 0, 0, 0, 0, 0)),
                v6_prefix: 64,
            },
            leases: Mutex::new(Leases::default()),
        }
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
        self.dual_stack = dual_stack;
        self
    }

    /// The ranges node addresses come from (IPv4 at most /30, IPv6 at most /126).
    ///
    /// # Errors
    /// A [`CidrError`] when a range does not parse.
    pub fn with_node_cidrs(mut self, v4: &str, v6: &str) -> Result<Self, CidrError> {
        self.nodes = Pool::parse(v4, v6)?;
        Ok(self)
    }

    /// The ranges pod addresses come from (IPv4 at most /30, IPv6 at most /126).
    ///
    /// # Errors
    /// A [`CidrError`] when a range does not parse.
    pub fn with_pod_cidrs(mut self, v4: &str, v6: &str) -> Result<Self, CidrError> {
        self.pods = Pool::parse(v4, v6)?;
        Ok(self)
    }

    /// The clock `Now` reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Returns the addresses of a pod that went away (its last state) to the pool;
    /// other objects are ignored.
    pub fn release(&self, object: &serde_json::Value) {
        let text = |p: &str| {
            object
                .pointer(p)
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
        };
        if object.get("kind").and_then(serde_json::Value::as_str) != Some("Pod")
            || text("/apiVersion") != "v1"
        {
            return;
        }
        self.release_pod(&PodIpRequest {
            node_name: text("/spec/nodeName"),
            host_network: object.pointer("/spec/hostNetwork")
                == Some(&serde_json::Value::Bool(true)),
            uid: text("/metadata/uid"),
            name: text("/metadata/name"),
            namespace: text("/metadata/namespace"),
        });
    }

    /// How many pods hold addresses.
    pub fn leased_pods(&self) -> usize {
        self.leases().pods.len()
    }

    /// Returns a pod's addresses to the pool (when the pod is deleted); the lowest freed
    /// addresses are handed out first.
    pub fn release_pod(&self, pod: &PodIpRequest<'_>) {
        if let Some(key) = PodKey::of(pod) {
            let mut leases = self.leases();
            if let Some(index) = leases.pods.remove(&key) {
                leases.free_pods.insert(index);
            }
        }
    }

    fn leases(&self) -> MutexGuard<'_, Leases> {
        // The lease maps stay consistent between statements, so a poisoned lock is usable.
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn node_index(&self, node_name: &str) -> Result<u64, String> {
        let mut leases = self.leases();
        if let Some(index) = leases.nodes.get(node_name) {
            return Ok(*index);
        }
        let index = leases.next_node;
        if u128::from(index) >= self.nodes.capacity() {
            return Err(format!("node range {} exhausted", self.nodes.describe()));
        }
        leases.next_node += 1;
        leases.nodes.insert(node_name.to_owned(), index);
        Ok(index)
    }

    fn pod_index(&self, key: Option<PodKey>) -> Result<u64, String> {
        let mut leases = self.leases();
        if let Some(index) = key.as_ref().and_then(|k| leases.pods.get(k)) {
            return Ok(*index);
        }
        let index = match leases.free_pods.pop_first() {
            Some(index) => index,
            None => {
                let index = leases.next_pod;
                if u128::from(index) >= self.pods.capacity() {
                    return Err(format!("pod range {} exhausted", self.pods.describe()));
                }
                leases.next_pod += 1;
                index
            }
        };
        if let Some(key) = key {
            leases.pods.insert(key, index);
        }
        Ok(index)
    }

    fn pair(&self, pool: &Pool, index: u64) -> Vec<String> {
        let mut ips = vec![pool.v4(index).to_string()];
        if self.dual_stack {
            ips.push(pool.v6(index).to_string());
        }
        ips
    }
}

impl TemplateEnv for SimEnv {
    fn now(&self) -> String {
        go_rfc3339_nano(self.clock.now())
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
        let index = self.pod_index(None)?;
        Ok(self.pods.v4(index).to_string())
    }
    fn node_ip_with(&self, node_name: &str) -> Result<String, String> {
        if node_name.is_empty() {
            return self.node_ip();
        }
        Ok(self.nodes.v4(self.node_index(node_name)?).to_string())
    }
    fn node_ips_with(&self, node_name: &str) -> Result<Vec<String>, String> {
        if node_name.is_empty() {
            return Ok(vec![self.node_ip.clone()]);
        }
        let index = self.node_index(node_name)?;
        Ok(self.pair(&self.nodes, index))
    }
    fn pod_ip_with(&self, pod: &PodIpRequest<'_>) -> Result<String, String> {
        if pod.host_network {
            return self.node_ip_with(pod.node_name);
        }
        let index = self.pod_index(PodKey::of(pod))?;
        Ok(self.pods.v4(index).to_string())
    }
    fn pod_ips_with(&self, pod: &PodIpRequest<'_>) -> Result<Vec<String>, String> {
        if pod.host_network {
            return self.node_ips_with(pod.node_name);
        }
        let index = self.pod_index(PodKey::of(pod))?;
        Ok(self.pair(&self.pods, index))
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

    fn env() -> (Arc<ManualClock>, SimEnv) {
        let clock = Arc::new(ManualClock::new(start()));
        let env = SimEnv::new(clock.clone(), start(), "v0.7.0");
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
        check::<SimEnv>();
        check::<GoldenEnv>();
    }
}
