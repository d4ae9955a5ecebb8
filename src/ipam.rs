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
    assignments: Mutex<Assignments>,
}

impl std::fmt::Debug for Ipam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ipam")
            .field("nodes", &self.nodes.describe())
            .field("pods", &self.pods.describe())
            .field("dual_stack", &self.dual_stack)
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

    /// Learns what a watched object means for the address pools: a node's pod ranges.
    pub fn observe(&self, object: &serde_json::Value) {
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

/// Whether `object` is the core (`v1`) `kind`.
fn is_core(object: &serde_json::Value, kind: &str) -> bool {
    object.get("kind").and_then(serde_json::Value::as_str) == Some(kind)
        && object.get("apiVersion").and_then(serde_json::Value::as_str) == Some("v1")
}
