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

thread_local! {
    /// The address range an IP function of the template executing on this thread found
    /// full (see [`exhausted`]).
    static EXHAUSTED: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// The error of an IP function whose `range` has no free address. Template functions
/// report errors as text through the template engine, so the range is also recorded for
/// [`Template`](super::Template) to turn the failed execution into the typed
/// [`TemplateError::AddressRangeExhausted`](super::TemplateError::AddressRangeExhausted)
/// (transient: addresses come back as pods go).
fn exhausted(range: String) -> String {
    let message = format!("{range} exhausted (no free address)");
    EXHAUSTED.with(|e| *e.borrow_mut() = Some(range));
    message
}

/// Take what [`exhausted`] recorded on this thread (templates execute synchronously, so
/// it belongs to the execution that just failed); also clears a stale record.
pub(super) fn take_exhausted() -> Option<String> {
    EXHAUSTED.with(|e| e.borrow_mut().take())
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

/// An IPv4 and/or an IPv6 range that hand out addresses by index: index `i` is the
/// `i + 1`-th host address of each range (the network address is skipped). The global
/// ranges have both families; a node's `podCIDRs` may have one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Pool {
    v4: Option<(u32, u8)>,
    v6: Option<(u128, u8)>,
}

impl Pool {
    fn parse(v4: &str, v6: &str) -> Result<Self, CidrError> {
        Ok(Self {
            v4: Some(parse_v4(v4)?),
            v6: Some(parse_cidr::<Ipv6Addr>(v6, 126)?),
        })
    }

    /// The ranges of a node's `spec.podCIDRs` (the first of each family; `None` when
    /// none parses).
    fn of_node(cidrs: &[&str]) -> Option<Self> {
        let mut pool = Self { v4: None, v6: None };
        for cidr in cidrs {
            if cidr.contains(':') {
                if pool.v6.is_none() {
                    pool.v6 = parse_cidr::<Ipv6Addr>(cidr, 126).ok();
                }
            } else if pool.v4.is_none() {
                pool.v4 = parse_v4(cidr).ok();
            }
        }
        (pool.v4.is_some() || pool.v6.is_some()).then_some(pool)
    }

    /// How many indexes every range can serve (IPv4 loses its broadcast address).
    fn capacity(&self) -> u128 {
        let v4 = self.v4.map_or(u128::MAX, |(_, prefix)| {
            (1u128 << (32 - u32::from(prefix))) - 2
        });
        let v6 = self.v6.map_or(u128::MAX, |(_, prefix)| {
            1u128
                .checked_shl(128 - u32::from(prefix))
                .map_or(u128::MAX, |n| n - 1)
        });
        v4.min(v6)
    }

    /// The addresses of `index`: IPv4 first, IPv6 only when `dual_stack` or alone.
    fn addresses(&self, index: u64, dual_stack: bool) -> Vec<String> {
        let mut ips = Vec::with_capacity(2);
        if let Some((base, _)) = self.v4 {
            let offset = u32::try_from(index).unwrap_or(u32::MAX).saturating_add(1);
            ips.push(Ipv4Addr::from(base.wrapping_add(offset)).to_string());
        }
        if let Some((base, _)) = self.v6
            && (dual_stack || ips.is_empty())
        {
            ips.push(Ipv6Addr::from(base.wrapping_add(u128::from(index) + 1)).to_string());
        }
        ips
    }

    /// The first address of `index`.
    fn address(&self, index: u64) -> String {
        self.addresses(index, false).swap_remove(0)
    }

    fn describe(&self) -> String {
        let v4 = self
            .v4
            .map(|(base, prefix)| format!("{}/{prefix}", Ipv4Addr::from(base)));
        let v6 = self
            .v6
            .map(|(base, prefix)| format!("{}/{prefix}", Ipv6Addr::from(base)));
        v4.into_iter().chain(v6).collect::<Vec<_>>().join(" and ")
    }
}

fn parse_v4(cidr: &str) -> Result<(u32, u8), CidrError> {
    let (base, prefix) = parse_cidr::<Ipv4Addr>(cidr, 30)?;
    let base = u32::try_from(base).map_err(|_| CidrError {
        cidr: cidr.to_owned(),
        reason: "not an IPv4 range".to_owned(),
    })?;
    Ok((base, prefix))
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

/// The addresses handed out from one pod range.
#[derive(Debug, Default)]
struct PodRange {
    /// The next never-used index.
    next: u64,
    /// Indexes given back, handed out again lowest first.
    free: BTreeSet<u64>,
    /// Pods holding an address of this range.
    used: usize,
    /// Nodes whose `podCIDRs` name this range.
    nodes: usize,
}

/// Which index each node and pod holds.
#[derive(Debug, Default)]
struct Assignments {
    nodes: HashMap<String, u64>,
    next_node: u64,
    /// The pod ranges of nodes that have `spec.podCIDRs` (others use the global range).
    node_ranges: HashMap<String, Pool>,
    ranges: HashMap<Pool, PodRange>,
    pods: HashMap<PodKey, (Pool, u64)>,
}

impl Assignments {
    /// Forgets `pool`'s range when no pod and no node uses it any more (the global range
    /// is kept: it is the fallback).
    fn tidy(&mut self, pool: Pool, global: Pool) {
        if pool != global
            && self
                .ranges
                .get(&pool)
                .is_some_and(|r| r.used == 0 && r.nodes == 0)
        {
            self.ranges.remove(&pool);
        }
    }
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
///
/// A node seen with `spec.podCIDRs` (or `spec.podCIDR`), told by [`SimEnv::observe`],
/// gives its pods addresses from its own ranges, as KWOK does: a node with only an IPv4
/// range gives single-stack pods. Addresses go back to their range when the pod goes away
/// ([`SimEnv::release`]); a range no node and no pod uses any more is forgotten.
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
    assignments: Mutex<Assignments>,
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
                v4: Some((u32::from(Ipv4Addr::new(10, 1, 0, 0)), 16)),
                v6: Some((
                    u128::from(Ipv6Addr::new(0xfd00, 0x10, 0x1, 0, 0, 0, 0, 0)),
                    64,
                )),
            },
            pods: Pool {
                v4: Some((u32::from(Ipv4Addr::new(10, 244, 0, 0)), 16)),
                v6: Some((
                    u128::from(Ipv6Addr::new(0xfd00, 0x10, 0x244, 0, 0, 0, 0, 0)),
                    64,
                )),
            },
            assignments: Mutex::new(Assignments::default()),
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

    /// Learns what a watched object means for the address pools: a node's pod ranges.
    pub fn observe(&self, object: &serde_json::Value) {
        if !is_core(object, "Node") {
            return;
        }
        let Some(name) = object.pointer("/metadata/name").and_then(|n| n.as_str()) else {
            return;
        };
        let spec = object.get("spec");
        let listed = spec
            .and_then(|s| s.get("podCIDRs"))
            .and_then(serde_json::Value::as_array);
        let cidrs: Vec<&str> = match listed {
            Some(list) => list.iter().filter_map(serde_json::Value::as_str).collect(),
            None => spec
                .and_then(|s| s.get("podCIDR"))
                .and_then(serde_json::Value::as_str)
                .into_iter()
                .collect(),
        };
        let pool = Pool::of_node(&cidrs);
        if pool.is_none() && !cidrs.is_empty() {
            tracing::warn!(
                node = name,
                ?cidrs,
                "unusable podCIDRs: the node's pods get addresses from the global range"
            );
        }
        let mut assignments = self.assignments();
        if assignments.node_ranges.get(name).copied() == pool {
            return;
        }
        self.forget_range(&mut assignments, name);
        if let Some(pool) = pool {
            assignments.node_ranges.insert(name.to_owned(), pool);
            assignments.ranges.entry(pool).or_default().nodes += 1;
        }
    }

    fn forget_range(&self, assignments: &mut Assignments, node: &str) {
        if let Some(old) = assignments.node_ranges.remove(node) {
            if let Some(range) = assignments.ranges.get_mut(&old) {
                range.nodes -= 1;
            }
            assignments.tidy(old, self.pods);
        }
    }

    /// Returns what an object that went away (its last state) held: a pod's addresses,
    /// a node's pod ranges. Other objects are ignored.
    pub fn release(&self, object: &serde_json::Value) {
        let text = |p: &str| {
            object
                .pointer(p)
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
        };
        if is_core(object, "Node") {
            self.forget_range(&mut self.assignments(), text("/metadata/name"));
            return;
        }
        if !is_core(object, "Pod") {
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
        self.assignments().pods.len()
    }

    /// How many pod ranges are in use besides the global one (nodes' `podCIDRs`).
    pub fn node_ranges(&self) -> usize {
        let assignments = self.assignments();
        assignments
            .ranges
            .keys()
            .filter(|p| **p != self.pods)
            .count()
    }

    /// Returns a pod's addresses to its range (when the pod is deleted); the lowest freed
    /// addresses are handed out first.
    pub fn release_pod(&self, pod: &PodIpRequest<'_>) {
        if let Some(key) = PodKey::of(pod) {
            let mut assignments = self.assignments();
            if let Some((pool, index)) = assignments.pods.remove(&key) {
                if let Some(range) = assignments.ranges.get_mut(&pool) {
                    range.free.insert(index);
                    range.used -= 1;
                }
                assignments.tidy(pool, self.pods);
            }
        }
    }

    fn assignments(&self) -> MutexGuard<'_, Assignments> {
        // The lease maps stay consistent between statements, so a poisoned lock is usable.
        self.assignments
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn node_index(&self, node_name: &str) -> Result<u64, String> {
        let mut assignments = self.assignments();
        if let Some(index) = assignments.nodes.get(node_name) {
            return Ok(*index);
        }
        let index = assignments.next_node;
        if u128::from(index) >= self.nodes.capacity() {
            return Err(exhausted(format!("node range {}", self.nodes.describe())));
        }
        assignments.next_node += 1;
        assignments.nodes.insert(node_name.to_owned(), index);
        Ok(index)
    }

    /// The range and index of a pod on `node`: the one it holds, else a free one of the
    /// node's range (the global range when the node has none).
    fn pod_index(&self, key: Option<PodKey>, node: &str) -> Result<(Pool, u64), String> {
        let mut assignments = self.assignments();
        if let Some(held) = key.as_ref().and_then(|k| assignments.pods.get(k)) {
            return Ok(*held);
        }
        let pool = assignments
            .node_ranges
            .get(node)
            .copied()
            .unwrap_or(self.pods);
        let range = assignments.ranges.entry(pool).or_default();
        let index = match range.free.pop_first() {
            Some(index) => index,
            None => {
                let index = range.next;
                if u128::from(index) >= pool.capacity() {
                    let owner = if pool == self.pods {
                        String::new()
                    } else {
                        format!(" of node {node}")
                    };
                    return Err(exhausted(format!("pod range {}{owner}", pool.describe())));
                }
                range.next += 1;
                index
            }
        };
        if let Some(key) = key {
            range.used += 1;
            assignments.pods.insert(key, (pool, index));
        }
        Ok((pool, index))
    }
}

/// The address pools follow the nodes (their pod ranges) and the pods (their addresses
/// come back when they go).
impl crate::cluster::Observer for SimEnv {
    fn applied(&self, object: &serde_json::Value) {
        self.observe(object);
    }
    fn gone(&self, object: &serde_json::Value) {
        self.release(object);
    }
}

/// Whether `object` is the core (`v1`) `kind`.
fn is_core(object: &serde_json::Value, kind: &str) -> bool {
    object.get("kind").and_then(serde_json::Value::as_str) == Some(kind)
        && object.get("apiVersion").and_then(serde_json::Value::as_str) == Some("v1")
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
        let (pool, index) = self.pod_index(None, "")?;
        Ok(pool.address(index))
    }
    fn node_ip_with(&self, node_name: &str) -> Result<String, String> {
        if node_name.is_empty() {
            return self.node_ip();
        }
        Ok(self.nodes.address(self.node_index(node_name)?))
    }
    fn node_ips_with(&self, node_name: &str) -> Result<Vec<String>, String> {
        if node_name.is_empty() {
            return Ok(vec![self.node_ip.clone()]);
        }
        let index = self.node_index(node_name)?;
        Ok(self.nodes.addresses(index, self.dual_stack))
    }
    fn pod_ip_with(&self, pod: &PodIpRequest<'_>) -> Result<String, String> {
        if pod.host_network {
            return self.node_ip_with(pod.node_name);
        }
        let (pool, index) = self.pod_index(PodKey::of(pod), pod.node_name)?;
        Ok(pool.address(index))
    }
    fn pod_ips_with(&self, pod: &PodIpRequest<'_>) -> Result<Vec<String>, String> {
        if pod.host_network {
            return self.node_ips_with(pod.node_name);
        }
        let (pool, index) = self.pod_index(PodKey::of(pod), pod.node_name)?;
        Ok(pool.addresses(index, self.dual_stack))
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
            take_exhausted().as_deref(),
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
        check::<SimEnv>();
        check::<GoldenEnv>();
    }
}
