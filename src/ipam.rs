//! IP address management: the node and pod address pools the templates' IP functions
//! draw from (`NodeIPWith`, `PodIPWith` ...), as KWOK gives them.
//!
//! Nodes and pods get addresses in the order they are first asked about, from a node
//! range (default `10.1.0.0/16` + `fd00:10:1::/64`) and a pod range (default
//! `10.244.0.0/16` + `fd00:10:244::/64`): the same node or pod always gets the same
//! address, different ones different addresses. A node seen with `spec.podCIDRs` (or
//! `spec.podCIDR`), told by [`Ipam::observe`], gives its pods addresses from its own
//! ranges; a node with only an IPv4 range gives single-stack pods. Addresses go back to
//! their range when the pod goes away ([`Ipam::release`]); a range no node and no pod
//! uses any more is forgotten. A full range is an error the step that asked retries
//! (addresses come back as pods go).
//!
//! A pod seen with `status.podIPs` inside its range keeps that address, and it is not
//! handed out again ([`Ipam::observe`]): a restarted kstage, or a replica that took a
//! node over from another, learns what was handed out before. With several replicas
//! ([`Ipam::with_node_ranges_only`]) the global range is not used at all: each node's
//! pods draw from the node's own range, which [`crate::node_ipam`] assigns from the
//! per-node ranges carved out of the pod range ([`Ipam::node_pod_cidrs`]); until the
//! node has one, its pods' IP functions fail (transiently, as a full range does).

use std::collections::{BTreeSet, HashMap};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Who a pod is, to keep its address: its UID, else its namespace and name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PodId<'a> {
    /// `.metadata.uid`.
    pub uid: &'a str,
    /// `.metadata.namespace`.
    pub namespace: &'a str,
    /// `.metadata.name`.
    pub name: &'a str,
}

thread_local! {
    /// The address range an IP function of the template executing on this thread found
    /// full (see [`exhausted`]).
    static EXHAUSTED: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// The error of an IP function whose `range` has no free address. Template functions
/// report errors as text through the template engine, so the range is also recorded for
/// [`Template`](crate::template::Template) to turn the failed execution into the typed
/// [`TemplateError::AddressRangeExhausted`](crate::template::TemplateError::AddressRangeExhausted)
/// (transient: addresses come back as pods go).
fn exhausted(range: String) -> String {
    let message = format!("{range} exhausted (no free address)");
    EXHAUSTED.with(|e| *e.borrow_mut() = Some(range));
    message
}

/// The error of a pod IP function for a node with no pod range yet, when pods may only
/// draw from their node's range: transient as [`exhausted`] (the node gets a range).
fn unassigned(node: &str) -> String {
    let message = format!("node {node:?} has no pod range yet (spec.podCIDRs)");
    EXHAUSTED.with(|e| *e.borrow_mut() = Some(format!("pod range of node {node:?}")));
    message
}

/// Take what [`exhausted`] recorded on this thread (templates execute synchronously, so
/// it belongs to the execution that just failed); also clears a stale record.
pub(crate) fn take_exhausted() -> Option<String> {
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

    /// The index whose address `ip` is, when it is a host address of this pool's range
    /// of its family.
    fn index_of(&self, ip: &str) -> Option<u64> {
        let offset = if ip.contains(':') {
            let (base, _) = self.v6?;
            u128::from(ip.parse::<Ipv6Addr>().ok()?).checked_sub(base)?
        } else {
            let (base, _) = self.v4?;
            u128::from(u32::from(ip.parse::<Ipv4Addr>().ok()?).checked_sub(base)?)
        };
        // Offset 0 is the network address; beyond the capacity lie IPv4's broadcast
        // address and other ranges.
        let index = offset.checked_sub(1)?;
        if index >= self.capacity() {
            return None;
        }
        u64::try_from(index).ok()
    }
}

/// The prefix length of the per-node IPv4 ranges carved out of the pod range (as
/// kube-controller-manager's default `--node-cidr-mask-size-ipv4`).
const NODE_PREFIX_V4: u8 = 24;
/// How many prefix bits the per-node IPv6 ranges add to the pod range (a `/64` gives
/// `/80`s); at most `/120`.
const NODE_BITS_V6: u8 = 16;

/// One family of a pod range split into per-node ranges: `(base, prefix)` of the pod
/// range, the prefix of a node range, and the address width.
#[derive(Debug, Clone, Copy)]
struct Split {
    base: u128,
    prefix: u8,
    node_prefix: u8,
    width: u8,
}

impl Split {
    fn v4((base, prefix): (u32, u8)) -> Self {
        Self {
            base: u128::from(base),
            prefix,
            node_prefix: NODE_PREFIX_V4.max(prefix),
            width: 32,
        }
    }

    fn v6((base, prefix): (u128, u8)) -> Self {
        Self {
            base,
            prefix,
            node_prefix: prefix.saturating_add(NODE_BITS_V6).min(120).max(prefix),
            width: 128,
        }
    }

    /// How many node ranges (saturating at `u32::MAX`).
    fn count(&self) -> u32 {
        1u64.checked_shl(u32::from(self.node_prefix - self.prefix))
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(u32::MAX)
    }

    /// The text of node range `index`.
    fn cidr(&self, index: u32) -> Option<String> {
        if index >= self.count() {
            return None;
        }
        let start = self.base + (u128::from(index) << (self.width - self.node_prefix));
        let text = if self.width == 32 {
            Ipv4Addr::from(u32::try_from(start).ok()?).to_string()
        } else {
            Ipv6Addr::from(start).to_string()
        };
        Some(format!("{text}/{}", self.node_prefix))
    }

    /// The node ranges `(first, last)` that the range `start/prefix` of this family
    /// overlaps, if any.
    fn overlapped(&self, start: u128, prefix: u8) -> Option<(u32, u32)> {
        let span = |p: u8| {
            1u128
                .checked_shl(u32::from(self.width - p))
                .map_or(u128::MAX, |n| n - 1)
        };
        let (first, last) = (
            start.max(self.base),
            (start + span(prefix)).min(self.base + span(self.prefix)),
        );
        if first > last {
            return None;
        }
        let shift = u32::from(self.width - self.node_prefix);
        let index =
            |address: u128| u32::try_from((address - self.base) >> shift).unwrap_or(u32::MAX);
        Some((index(first), index(last).min(self.count() - 1)))
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
    /// A pod is known by its UID, or by namespace and name when it has none.
    fn new(pod: &PodId<'_>) -> Option<Self> {
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
    /// Indexes at or past `next` that pods seen with them hold (skipped by `next`).
    ahead: BTreeSet<u64>,
}

impl PodRange {
    /// A free index (the lowest given back, else the next never used), unless
    /// `capacity` are in use.
    fn allocate(&mut self, capacity: u128) -> Option<u64> {
        if let Some(index) = self.free.pop_first() {
            return Some(index);
        }
        while self.ahead.remove(&self.next) {
            self.next += 1;
        }
        if u128::from(self.next) >= capacity {
            return None;
        }
        self.next += 1;
        Some(self.next - 1)
    }

    /// Mark `index` as held (a pod seen with its address); false when it already is.
    fn take(&mut self, index: u64) -> bool {
        if index < self.next {
            self.free.remove(&index)
        } else {
            self.ahead.insert(index)
        }
    }

    /// Give `index` back.
    fn give_back(&mut self, index: u64) {
        if index < self.next {
            self.free.insert(index);
        } else {
            self.ahead.remove(&index);
        }
    }
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

/// The address pools and who holds which address.
pub struct Ipam {
    nodes: Pool,
    pods: Pool,
    dual_stack: bool,
    node_ranges_only: bool,
    assignments: Mutex<Assignments>,
}

impl std::fmt::Debug for Ipam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ipam")
            .field("nodes", &self.nodes.describe())
            .field("pods", &self.pods.describe())
            .field("dual_stack", &self.dual_stack)
            .field("node_ranges_only", &self.node_ranges_only)
            .finish_non_exhaustive()
    }
}

impl Default for Ipam {
    fn default() -> Self {
        Self {
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
            dual_stack: true,
            node_ranges_only: false,
            assignments: Mutex::new(Assignments::default()),
        }
    }
}

impl Ipam {
    /// Whether the `*IPsWith` functions give an IPv6 address too (default true).
    #[must_use]
    pub fn with_dual_stack(mut self, dual_stack: bool) -> Self {
        self.dual_stack = dual_stack;
        self
    }

    /// Whether a pod may only get an address from its node's range (default false: a
    /// node without one gives addresses from the global range). Several replicas each
    /// drawing from the global range would hand out the same addresses; with this, a
    /// pod on a node without a range fails to get one (transiently) until the node has
    /// a range.
    #[must_use]
    pub fn with_node_ranges_only(mut self, only: bool) -> Self {
        self.node_ranges_only = only;
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

    /// The address of node `name` (given in the order nodes are first asked about).
    pub fn node_address(&self, name: &str) -> Result<String, String> {
        Ok(self.nodes.address(self.node_index(name)?))
    }

    /// The addresses of node `name`: IPv4, and IPv6 when dual-stack.
    pub fn node_addresses(&self, name: &str) -> Result<Vec<String>, String> {
        let index = self.node_index(name)?;
        Ok(self.nodes.addresses(index, self.dual_stack))
    }

    /// The address of a pod on `node` (`None`: an anonymous pod, given a fresh address
    /// it does not keep).
    pub fn pod_address(&self, pod: Option<&PodId<'_>>, node: &str) -> Result<String, String> {
        let (pool, index) = self.pod_index(pod.and_then(PodKey::new), node)?;
        Ok(pool.address(index))
    }

    /// The addresses of a pod on `node`: IPv4, and IPv6 when dual-stack and its range has
    /// one.
    pub fn pod_addresses(&self, pod: &PodId<'_>, node: &str) -> Result<Vec<String>, String> {
        let (pool, index) = self.pod_index(PodKey::new(pod), node)?;
        Ok(pool.addresses(index, self.dual_stack))
    }

    /// Learns what a watched object means for the address pools: a node's pod ranges, a
    /// pod's addresses (see [`Ipam::observe_pod`]).
    pub fn observe(&self, object: &serde_json::Value) {
        if is_core(object, "Pod") {
            self.observe_pod(object);
            return;
        }
        if !is_core(object, "Node") {
            return;
        }
        let Some(name) = crate::cluster::meta_str(object, "name") else {
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

    /// A pod seen with `status.podIPs` (or `podIP`) in the range of its node (the global
    /// range when its node has none and pods may use it) holds that address from now on,
    /// unless it holds one already: it is not handed out to another pod. An address that
    /// another pod holds here is left to it (and logged).
    fn observe_pod(&self, pod: &serde_json::Value) {
        let status = pod.get("status");
        let listed = status
            .and_then(|s| s.get("podIPs"))
            .and_then(serde_json::Value::as_array);
        let ips: Vec<&str> = match listed {
            Some(list) => list
                .iter()
                .filter_map(|ip| ip.get("ip").and_then(serde_json::Value::as_str))
                .collect(),
            None => status
                .and_then(|s| s.get("podIP"))
                .and_then(serde_json::Value::as_str)
                .into_iter()
                .collect(),
        };
        if ips.is_empty() {
            return;
        }
        let text = |field: &str| crate::cluster::meta_str(pod, field).unwrap_or("");
        let Some(key) = PodKey::new(&PodId {
            uid: text("uid"),
            namespace: text("namespace"),
            name: text("name"),
        }) else {
            return;
        };
        let node = pod
            .pointer("/spec/nodeName")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        let mut assignments = self.assignments();
        if assignments.pods.contains_key(&key) {
            return;
        }
        let pool = match assignments.node_ranges.get(node) {
            Some(pool) => *pool,
            None if self.node_ranges_only => return,
            None => self.pods,
        };
        let Some(index) = ips.iter().find_map(|ip| pool.index_of(ip)) else {
            return;
        };
        let range = assignments.ranges.entry(pool).or_default();
        if !range.take(index) {
            tracing::warn!(
                pod = text("name"),
                namespace = text("namespace"),
                ?ips,
                "the pod's address is held by another pod here: left to that one"
            );
            assignments.tidy(pool, self.pods);
            return;
        }
        range.used += 1;
        assignments.pods.insert(key, (pool, index));
    }

    /// Whether node `name` has a pod range of its own (its `spec.podCIDRs`, observed).
    pub fn has_node_range(&self, name: &str) -> bool {
        self.assignments().node_ranges.contains_key(name)
    }

    /// How many per-node ranges the pod range splits into (see
    /// [`Ipam::node_pod_cidrs`]).
    pub fn node_pod_cidr_count(&self) -> u32 {
        self.splits().iter().map(Split::count).min().unwrap_or(0)
    }

    /// The `index`-th per-node range carved out of the pod range, as `spec.podCIDRs`
    /// (IPv4 first): a `/24` of the IPv4 range (the whole range when it is smaller),
    /// and, when dual-stack, the `index`-th of its IPv6 range split 16 bits further (a
    /// `/64` gives `/80`s). `None` past [`Ipam::node_pod_cidr_count`].
    pub fn node_pod_cidrs(&self, index: u32) -> Option<Vec<String>> {
        if index >= self.node_pod_cidr_count() {
            return None;
        }
        self.splits().iter().map(|s| s.cidr(index)).collect()
    }

    /// The per-node ranges (first and last index) that `cidr` overlaps; `None` when it
    /// overlaps none or does not parse.
    pub fn node_pod_cidrs_overlapped(&self, cidr: &str) -> Option<(u32, u32)> {
        let splits = self.splits();
        let (start, prefix, width) = if cidr.contains(':') {
            let (start, prefix) = parse_cidr::<Ipv6Addr>(cidr, 128).ok()?;
            (start, prefix, 128)
        } else {
            let (start, prefix) = parse_cidr::<Ipv4Addr>(cidr, 32).ok()?;
            (start, prefix, 32)
        };
        let count = self.node_pod_cidr_count();
        splits
            .iter()
            .filter(|s| s.width == width)
            .find_map(|s| s.overlapped(start, prefix))
            .filter(|(first, _)| *first < count)
            .map(|(first, last)| (first, last.min(count.saturating_sub(1))))
    }

    /// The families per-node ranges are carved from: IPv4, and IPv6 when dual-stack.
    fn splits(&self) -> Vec<Split> {
        let v4 = self.pods.v4.map(Split::v4);
        let v6 = self.pods.v6.filter(|_| self.dual_stack).map(Split::v6);
        v4.into_iter().chain(v6).collect()
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
        let text = |field: &str| crate::cluster::meta_str(object, field).unwrap_or("");
        if is_core(object, "Node") {
            self.forget_range(&mut self.assignments(), text("name"));
            return;
        }
        if !is_core(object, "Pod") {
            return;
        }
        self.release_pod(&PodId {
            uid: text("uid"),
            namespace: text("namespace"),
            name: text("name"),
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
    pub fn release_pod(&self, pod: &PodId<'_>) {
        if let Some(key) = PodKey::new(pod) {
            let mut assignments = self.assignments();
            if let Some((pool, index)) = assignments.pods.remove(&key) {
                if let Some(range) = assignments.ranges.get_mut(&pool) {
                    range.give_back(index);
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
    /// node's range (the global range when the node has none, unless pods may only draw
    /// from their node's range).
    fn pod_index(&self, key: Option<PodKey>, node: &str) -> Result<(Pool, u64), String> {
        let mut assignments = self.assignments();
        if let Some(held) = key.as_ref().and_then(|k| assignments.pods.get(k)) {
            return Ok(*held);
        }
        let pool = match assignments.node_ranges.get(node) {
            Some(pool) => *pool,
            None if self.node_ranges_only => return Err(unassigned(node)),
            None => self.pods,
        };
        let range = assignments.ranges.entry(pool).or_default();
        let Some(index) = range.allocate(pool.capacity()) else {
            let owner = if pool == self.pods {
                String::new()
            } else {
                format!(" of node {node}")
            };
            return Err(exhausted(format!("pod range {}{owner}", pool.describe())));
        };
        if let Some(key) = key {
            range.used += 1;
            assignments.pods.insert(key, (pool, index));
        }
        Ok((pool, index))
    }
}

/// Whether `object` is the core (`v1`) `kind`.
fn is_core(object: &serde_json::Value, kind: &str) -> bool {
    object.get("kind").and_then(serde_json::Value::as_str) == Some(kind)
        && object.get("apiVersion").and_then(serde_json::Value::as_str) == Some("v1")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(uid: &str) -> PodId<'_> {
        PodId {
            uid,
            namespace: "default",
            name: uid,
        }
    }

    fn v4(ipam: &Ipam, uid: &str, node: &str) -> Result<String, String> {
        ipam.pod_address(Some(&pod(uid)), node)
    }

    fn node(name: &str, cidrs: &[&str]) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
               "spec": {"podCIDRs": cidrs}})
    }

    fn pod_with_ips(uid: &str, node: &str, ips: &[&str]) -> serde_json::Value {
        let ips: Vec<_> = ips.iter().map(|ip| json!({"ip": ip})).collect();
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": uid, "namespace": "default", "uid": uid},
               "spec": {"nodeName": node}, "status": {"podIPs": ips}})
    }

    #[test]
    fn pods_get_addresses_in_order_and_keep_them() {
        let ipam = Ipam::default();
        assert_eq!(
            ipam.pod_addresses(&pod("a"), "n"),
            Ok(vec!["10.244.0.1".to_owned(), "fd00:10:244::1".to_owned()])
        );
        assert_eq!(v4(&ipam, "b", "n").as_deref(), Ok("10.244.0.2"));
        assert_eq!(v4(&ipam, "a", "n").as_deref(), Ok("10.244.0.1"));
        assert_eq!(ipam.leased_pods(), 2);
        // An anonymous pod gets a fresh address it does not keep.
        assert_eq!(ipam.pod_address(None, "n").as_deref(), Ok("10.244.0.3"));
        assert_eq!(ipam.leased_pods(), 2);
        // Single-stack: IPv4 alone.
        let single = Ipam::default().with_dual_stack(false);
        assert_eq!(
            single.pod_addresses(&pod("a"), "n"),
            Ok(vec!["10.244.0.1".to_owned()])
        );
    }

    #[test]
    fn released_addresses_are_handed_out_again_lowest_first() {
        let ipam = Ipam::default();
        for uid in ["a", "b", "c"] {
            v4(&ipam, uid, "n").expect("address");
        }
        ipam.release_pod(&pod("b"));
        ipam.release(&pod_with_ips("a", "n", &[]));
        assert_eq!(ipam.leased_pods(), 1);
        assert_eq!(v4(&ipam, "d", "n").as_deref(), Ok("10.244.0.1"));
        assert_eq!(v4(&ipam, "e", "n").as_deref(), Ok("10.244.0.2"));
        assert_eq!(v4(&ipam, "f", "n").as_deref(), Ok("10.244.0.4"));
    }

    #[test]
    fn a_full_range_fails_until_an_address_comes_back() {
        // A /30 has two host addresses (its network and broadcast addresses are not
        // handed out); the /126 four, of which the first two are used.
        let ipam = Ipam::default()
            .with_pod_cidrs("10.0.0.0/30", "fd00::/126")
            .expect("ranges");
        assert_eq!(
            ipam.pod_addresses(&pod("a"), "n"),
            Ok(vec!["10.0.0.1".to_owned(), "fd00::1".to_owned()])
        );
        assert_eq!(v4(&ipam, "b", "n").as_deref(), Ok("10.0.0.2"));
        take_exhausted();
        let full = v4(&ipam, "c", "n").expect_err("full");
        assert!(full.contains("exhausted"), "{full}");
        assert_eq!(
            take_exhausted().as_deref(),
            Some("pod range 10.0.0.0/30 and fd00::/126")
        );
        ipam.release_pod(&pod("a"));
        assert_eq!(v4(&ipam, "c", "n").as_deref(), Ok("10.0.0.1"));
        // A node range that is full names its node.
        ipam.observe(&node("small", &["10.9.0.0/30"]));
        for uid in ["x", "y"] {
            v4(&ipam, uid, "small").expect("address");
        }
        assert!(v4(&ipam, "z", "small").is_err());
        assert_eq!(
            take_exhausted().as_deref(),
            Some("pod range 10.9.0.0/30 of node small")
        );
    }

    #[test]
    fn ranges_must_parse_and_leave_room() {
        let bad = |v4: &str, v6: &str| Ipam::default().with_pod_cidrs(v4, v6).is_err();
        assert!(bad("10.0.0.0", "fd00::/64"));
        assert!(bad("10.0.0.0/31", "fd00::/64"));
        assert!(bad("fd00::/64", "fd00::/64"));
        assert!(bad("10.0.0.0/8", "fd00::/127"));
        assert!(bad("10.0.0.300/8", "fd00::/64"));
        // Host bits are cleared.
        let ipam = Ipam::default()
            .with_pod_cidrs("10.1.2.3/16", "fd00::5/64")
            .expect("ranges");
        assert_eq!(v4(&ipam, "a", "n").as_deref(), Ok("10.1.0.1"));
    }

    #[test]
    fn a_node_s_pod_cidrs_give_its_pods_addresses_until_it_goes() {
        let ipam = Ipam::default();
        ipam.observe(&node("n", &["10.1.2.0/24", "fd00:1::/80"]));
        ipam.observe(&node("v6", &["fd00:2::/80"]));
        assert!(ipam.has_node_range("n") && !ipam.has_node_range("other"));
        assert_eq!(
            ipam.pod_addresses(&pod("a"), "n"),
            Ok(vec!["10.1.2.1".to_owned(), "fd00:1::1".to_owned()])
        );
        assert_eq!(
            ipam.pod_addresses(&pod("b"), "v6"),
            Ok(vec!["fd00:2::1".to_owned()])
        );
        assert_eq!(v4(&ipam, "c", "other").as_deref(), Ok("10.244.0.1"));
        assert_eq!(ipam.node_ranges(), 2);
        // The range stays while a pod holds an address of it.
        ipam.release(&node("n", &[]));
        assert!(!ipam.has_node_range("n"));
        assert_eq!(ipam.node_ranges(), 2);
        ipam.release_pod(&pod("a"));
        assert_eq!(ipam.node_ranges(), 1);
    }

    #[test]
    fn observed_pod_addresses_are_kept_and_not_handed_out_again() {
        let ipam = Ipam::default();
        ipam.observe(&pod_with_ips(
            "seen",
            "n",
            &["10.244.0.2", "fd00:10:244::2"],
        ));
        // Past the next fresh address too.
        ipam.observe(&json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "ahead", "namespace": "default", "uid": "ahead"},
            "spec": {"nodeName": "n"}, "status": {"podIP": "10.244.0.4"}}));
        assert_eq!(ipam.leased_pods(), 2);
        let given: Vec<String> = ["a", "b", "c"]
            .iter()
            .map(|uid| v4(&ipam, uid, "n").expect("address"))
            .collect();
        assert_eq!(given, ["10.244.0.1", "10.244.0.3", "10.244.0.5"]);
        assert_eq!(v4(&ipam, "seen", "n").as_deref(), Ok("10.244.0.2"));
        assert_eq!(v4(&ipam, "ahead", "n").as_deref(), Ok("10.244.0.4"));
        // Given back, they are handed out again.
        ipam.release_pod(&pod("seen"));
        assert_eq!(v4(&ipam, "d", "n").as_deref(), Ok("10.244.0.2"));
        // An address held here already stays with its pod; the other pod gets its own.
        ipam.observe(&pod_with_ips("copy", "n", &["10.244.0.1"]));
        assert_eq!(v4(&ipam, "copy", "n").as_deref(), Ok("10.244.0.6"));
        // Addresses outside the range, its network and broadcast addresses are not
        // learned.
        for (uid, ip) in [
            ("out", "10.245.0.1"),
            ("net", "10.244.0.0"),
            ("bc", "10.244.255.255"),
        ] {
            ipam.observe(&pod_with_ips(uid, "n", &[ip]));
        }
        assert_eq!(ipam.leased_pods(), 6);
    }

    #[test]
    fn with_node_ranges_only_pods_wait_for_their_node_s_range() {
        let ipam = Ipam::default().with_node_ranges_only(true);
        take_exhausted();
        let waiting = v4(&ipam, "a", "n").expect_err("no range yet");
        assert!(waiting.contains("no pod range yet"), "{waiting}");
        assert_eq!(take_exhausted().as_deref(), Some("pod range of node \"n\""));
        assert!(ipam.pod_address(None, "").is_err());
        // A pod seen with an address on a node without a range is not learned.
        ipam.observe(&pod_with_ips("seen", "n", &["10.244.0.1"]));
        assert_eq!(ipam.leased_pods(), 0);
        ipam.observe(&node("n", &["10.244.7.0/24", "fd00:10:244:0:7::/80"]));
        ipam.observe(&pod_with_ips(
            "seen",
            "n",
            &["10.244.7.1", "fd00:10:244:0:7::1"],
        ));
        assert_eq!(
            ipam.pod_addresses(&pod("a"), "n"),
            Ok(vec![
                "10.244.7.2".to_owned(),
                "fd00:10:244:0:7::2".to_owned()
            ])
        );
    }

    #[test]
    fn the_pod_range_splits_into_distinct_node_ranges() {
        let ipam = Ipam::default();
        assert_eq!(ipam.node_pod_cidr_count(), 256);
        assert_eq!(
            ipam.node_pod_cidrs(0),
            Some(vec![
                "10.244.0.0/24".to_owned(),
                "fd00:10:244::/80".to_owned()
            ])
        );
        assert_eq!(
            ipam.node_pod_cidrs(5),
            Some(vec![
                "10.244.5.0/24".to_owned(),
                "fd00:10:244:0:5::/80".to_owned()
            ])
        );
        assert_eq!(
            ipam.node_pod_cidrs(255),
            Some(vec![
                "10.244.255.0/24".to_owned(),
                "fd00:10:244:0:ff::/80".to_owned()
            ])
        );
        assert_eq!(ipam.node_pod_cidrs(256), None);
        // Each range overlaps itself alone.
        for index in 0..256 {
            for cidr in ipam.node_pod_cidrs(index).expect("range") {
                assert_eq!(ipam.node_pod_cidrs_overlapped(&cidr), Some((index, index)));
            }
        }
        // Single-stack: IPv4 ranges alone; a wider range has more of them.
        let wide = Ipam::default()
            .with_dual_stack(false)
            .with_pod_cidrs("10.0.0.0/8", "fd00:10:244::/64")
            .expect("ranges");
        assert_eq!(wide.node_pod_cidr_count(), 65536);
        assert_eq!(
            wide.node_pod_cidrs(257),
            Some(vec!["10.1.1.0/24".to_owned()])
        );
        // A range narrower than a /24 is one node range.
        let narrow = Ipam::default()
            .with_pod_cidrs("10.0.0.64/26", "fd00::/120")
            .expect("ranges");
        assert_eq!(narrow.node_pod_cidr_count(), 1);
        assert_eq!(
            narrow.node_pod_cidrs(0),
            Some(vec!["10.0.0.64/26".to_owned(), "fd00::/120".to_owned()])
        );
    }

    #[test]
    fn ranges_overlap_the_node_ranges_they_share_addresses_with() {
        let ipam = Ipam::default();
        let overlapped = |cidr: &str| ipam.node_pod_cidrs_overlapped(cidr);
        assert_eq!(overlapped("10.244.5.128/25"), Some((5, 5)));
        assert_eq!(overlapped("10.244.4.0/23"), Some((4, 5)));
        assert_eq!(overlapped("10.244.0.0/16"), Some((0, 255)));
        assert_eq!(overlapped("10.0.0.0/8"), Some((0, 255)));
        assert_eq!(overlapped("10.245.0.0/24"), None);
        assert_eq!(overlapped("fd00:10:244:0:7::/80"), Some((7, 7)));
        assert_eq!(overlapped("fd00:10:244::/56"), Some((0, 255)));
        assert_eq!(overlapped("fd00:10:244:1::/64"), None);
        assert_eq!(overlapped("not a range"), None);
        // IPv6 ranges past the IPv4 ones' count block nothing.
        assert_eq!(overlapped("fd00:10:244:0:100::/80"), None);
        // Single-stack: IPv6 ranges are not handed out, so they block nothing.
        let single = Ipam::default().with_dual_stack(false);
        assert_eq!(single.node_pod_cidrs_overlapped("fd00:10:244::/80"), None);
    }
}
