//! Pod ranges of nodes with several replicas (`--node-leases`): before a replica plays a
//! node it has just won, it makes sure the node has `spec.podCIDRs` (assigning one when
//! it has none, as kube-controller-manager's node IPAM does with
//! `--allocate-node-cidrs`) and learns the addresses the node's pods already have
//! ([`NodeIpam`], the [`NodeGate`] of the lease loop).
//!
//! Ranges are the per-node ranges of the pod range ([`Ipam::node_pod_cidrs`]). A node is
//! given one only after this replica created the range's claim: a Lease
//! `kstage-pod-cidr-A-B-C-D-N` in `kube-node-lease` naming the node (`holderIdentity`,
//! and an owner reference, so the garbage collector deletes the claim with the node).
//! Creating an object is atomic: of two replicas claiming one range at once, one gets
//! 409 AlreadyExists and takes the next free one. So no range is given to two nodes,
//! whichever replicas assign them. Ranges that nodes already have (`spec.podCIDRs`,
//! whoever set them) are skipped too. When no range is free, the claims whose node is
//! gone (a consistent read says so) are deleted, and the search starts again.
//!
//! Addresses of a node's range are handed out only by the replica that holds the node's
//! Lease. The replica that takes a node over lists the pods (a consistent read made
//! after it holds the Lease, so after every write of the node's previous holder) and
//! learns their addresses before the node is played, so it hands none of them out again.
//!
//! [`Ipam::node_pod_cidrs`]: crate::ipam::Ipam::node_pod_cidrs

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;

use crate::lease::{NAMESPACE, NodeGate};
use crate::template::StageEnv;

/// The name prefix of a range's claim (a Lease in `kube-node-lease`).
pub const CLAIM_PREFIX: &str = "kstage-pod-cidr-";

/// The label every claim has (to list them).
pub const CLAIM_LABEL: &str = "kstage.dev/pod-cidr-claim";

/// The annotation of a claim with the node's ranges (`spec.podCIDRs`, comma-separated).
pub const CIDRS_ANNOTATION: &str = "kstage.dev/pod-cidrs";

/// Pods listed per request when a replica learns the addresses of the nodes it won.
const PAGE: u32 = 500;

/// Why a node was not given a range.
#[derive(Debug, thiserror::Error)]
pub enum NodeIpamError {
    /// Every per-node range is claimed or used by a node.
    #[error(
        "every per-node pod range is in use ({0} ranges): give a wider --cidr (a /8 has 65,536 /24s)"
    )]
    Exhausted(u32),
    /// A request failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// Assigns pod ranges to the nodes a replica wins and learns their pods' addresses (see
/// the module documentation).
pub struct NodeIpam {
    nodes: Api<Node>,
    pods: Api<Pod>,
    leases: Api<Lease>,
    env: Arc<StageEnv>,
    budget: Duration,
}

impl std::fmt::Debug for NodeIpam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeIpam")
            .field("ipam", self.env.ipam())
            .finish_non_exhaustive()
    }
}

/// A node's `spec.podCIDRs` (or `podCIDR`).
fn pod_cidrs(node: &Node) -> Vec<String> {
    let spec = node.spec.as_ref();
    match spec.and_then(|s| s.pod_cidrs.clone()) {
        Some(list) if !list.is_empty() => list,
        _ => spec.and_then(|s| s.pod_cidr.clone()).into_iter().collect(),
    }
}

/// The ranges a claim holds.
fn claimed_cidrs(claim: &Lease) -> Vec<String> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CIDRS_ANNOTATION))
        .map(|text| text.split(',').map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The UID of the node a claim is for.
fn claim_owner(claim: &Lease) -> Option<(&str, &str)> {
    let owner = claim.metadata.owner_references.as_ref()?.first()?;
    Some((owner.name.as_str(), owner.uid.as_str()))
}

/// The lowest node range index at or after 0 that no `(first, last)` of `blocked`
/// covers, below `count`.
fn lowest_free(blocked: &mut [(u32, u32)], count: u32) -> Option<u32> {
    blocked.sort_unstable();
    let mut index = 0u32;
    for &(first, last) in blocked.iter() {
        if last < index {
            continue;
        }
        if first > index {
            break;
        }
        index = last.checked_add(1)?;
    }
    (index < count).then_some(index)
}

impl NodeIpam {
    /// Ranges assigned and addresses learned through `client`, into `env`'s pools.
    pub fn new(client: kube::Client, env: Arc<StageEnv>) -> Self {
        Self {
            nodes: Api::all(client.clone()),
            pods: Api::all(client.clone()),
            leases: Api::namespaced(client, NAMESPACE),
            env,
            budget: Duration::from_secs(10),
        }
    }

    /// How long one round may spend assigning ranges (default 10 s; the lease loop
    /// renews nothing meanwhile, so keep it well under the lease duration). Nodes left
    /// without a range are played anyway and given one at the next rounds.
    #[must_use]
    pub fn with_budget(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }

    /// Prepare the nodes `taken` (just won) and `unready` (played, without a range):
    /// give those without a range one, and learn the addresses of the pods of `taken`.
    /// Returns the nodes of `taken` that may be played (their pods were listed).
    pub async fn prepare_nodes(&self, taken: &[String], unready: &[String]) -> BTreeSet<String> {
        let wanted: BTreeSet<&str> = taken.iter().chain(unready).map(String::as_str).collect();
        if wanted.is_empty() {
            return BTreeSet::new();
        }
        let nodes = match self.nodes.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(e) => {
                tracing::warn!("cannot list the nodes to assign pod ranges: {e}");
                return BTreeSet::new();
            }
        };
        let mut pending = Vec::new();
        for node in &nodes {
            if !wanted.contains(node.metadata.name.as_deref().unwrap_or("")) {
                continue;
            }
            if pod_cidrs(node).is_empty() {
                pending.push(node);
            } else {
                self.observe(node);
            }
        }
        if !pending.is_empty()
            && let Err(e) = self.assign(&pending, &nodes).await
        {
            tracing::warn!(nodes = pending.len(), "pod ranges not assigned: {e}");
        }
        let present: BTreeSet<&str> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        let taken: BTreeSet<&str> = taken
            .iter()
            .map(String::as_str)
            .filter(|n| present.contains(n))
            .collect();
        if taken.is_empty() {
            return BTreeSet::new();
        }
        match self.learn_pods(&taken).await {
            Ok(()) => taken.into_iter().map(str::to_owned).collect(),
            Err(e) => {
                tracing::warn!("cannot list the pods of the nodes won: {e}");
                BTreeSet::new()
            }
        }
    }

    fn observe<T: serde::Serialize>(&self, object: &T) {
        if let Ok(value) = serde_json::to_value(object) {
            self.env.observe(&value);
        }
    }

    /// Learn the addresses of the pods on `nodes` (every pod listed, in pages).
    async fn learn_pods(&self, nodes: &BTreeSet<&str>) -> Result<(), kube::Error> {
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let page = self.pods.list(&params).await?;
            for pod in &page.items {
                let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
                if node.is_some_and(|n| nodes.contains(n)) {
                    self.observe(pod);
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(()),
            }
        }
    }

    /// The claims of ranges (every replica's).
    async fn claims(&self) -> Result<Vec<Lease>, kube::Error> {
        let params = ListParams::default().labels(CLAIM_LABEL);
        Ok(self.leases.list(&params).await?.items)
    }

    /// The node ranges (first and last index) that nodes' `podCIDRs` and claims cover.
    fn blocked(&self, nodes: &[Node], claims: &[Lease]) -> Vec<(u32, u32)> {
        let ipam = self.env.ipam();
        let cidrs = nodes
            .iter()
            .flat_map(pod_cidrs)
            .chain(claims.iter().flat_map(claimed_cidrs));
        cidrs
            .filter_map(|c| ipam.node_pod_cidrs_overlapped(&c))
            .collect()
    }

    /// Give each of `pending` (nodes without a range) a free range: the one it claimed
    /// already (an earlier attempt that did not reach the node), else the lowest range
    /// neither claimed nor used by a node (`nodes`: all of them) that this replica then
    /// claims first.
    async fn assign(&self, pending: &[&Node], nodes: &[Node]) -> Result<(), NodeIpamError> {
        let count = self.env.ipam().node_pod_cidr_count();
        let mut claims = self.claims().await?;
        let mut blocked = self.blocked(nodes, &claims);
        let mut collected = false;
        let deadline = tokio::time::Instant::now() + self.budget;
        for node in pending {
            if tokio::time::Instant::now() >= deadline {
                tracing::info!("pod range assignment goes on at the next round");
                return Ok(());
            }
            let uid = node.metadata.uid.as_deref().unwrap_or("");
            let earlier = claims
                .iter()
                .find(|c| claim_owner(c).is_some_and(|(_, u)| u == uid))
                .map(claimed_cidrs)
                .filter(|c| !c.is_empty());
            let cidrs = match earlier {
                Some(cidrs) => cidrs,
                None => loop {
                    let Some(index) = lowest_free(&mut blocked, count) else {
                        if collected {
                            return Err(NodeIpamError::Exhausted(count));
                        }
                        collected = true;
                        self.collect(&claims, nodes).await?;
                        claims = self.claims().await?;
                        blocked = self.blocked(nodes, &claims);
                        continue;
                    };
                    blocked.push((index, index));
                    let Some(cidrs) = self.env.ipam().node_pod_cidrs(index) else {
                        return Err(NodeIpamError::Exhausted(count));
                    };
                    match self.claim(node, &cidrs).await {
                        Ok(()) => break cidrs,
                        Err(kube::Error::Api(e)) if e.code == 409 => continue,
                        Err(e) => return Err(e.into()),
                    }
                },
            };
            self.set_pod_cidrs(node, &cidrs).await;
        }
        Ok(())
    }

    /// Create the claim of `cidrs` for `node` (409 when another replica has it).
    async fn claim(&self, node: &Node, cidrs: &[String]) -> Result<(), kube::Error> {
        let name = node.metadata.name.as_deref().unwrap_or("");
        let first = cidrs.first().map_or("", String::as_str);
        let claim_name = format!("{CLAIM_PREFIX}{}", first.replace(['.', '/', ':'], "-"));
        let claim = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {
                "name": claim_name, "namespace": NAMESPACE,
                "labels": {CLAIM_LABEL: "true"},
                "annotations": {CIDRS_ANNOTATION: cidrs.join(",")},
                "ownerReferences": [{
                    "apiVersion": "v1", "kind": "Node", "name": name,
                    "uid": node.metadata.uid.clone().unwrap_or_default(),
                }],
            },
            "spec": {"holderIdentity": name},
        });
        let claim: Lease = serde_json::from_value(claim).unwrap_or_default();
        self.leases.create(&PostParams::default(), &claim).await?;
        tracing::info!(node = name, ?cidrs, "pod range claimed");
        Ok(())
    }

    /// Set the node's `spec.podCIDRs` (with the resourceVersion listed: a node changed
    /// meanwhile is left for the next round) and learn them.
    async fn set_pod_cidrs(&self, node: &Node, cidrs: &[String]) {
        let name = node.metadata.name.as_deref().unwrap_or("");
        let patch = json!({
            "metadata": {"resourceVersion": node.metadata.resource_version},
            "spec": {"podCIDR": cidrs.first(), "podCIDRs": cidrs},
        });
        match self
            .nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(node) => self.observe(&node),
            Err(e) => tracing::info!(node = name, "pod range not set (next round): {e}"),
        }
    }

    /// Delete the claims whose node is gone: not among `nodes` with its UID, and a read
    /// of it finds none or another one (a new node of that name). Each deletion carries
    /// the claim's UID and resourceVersion.
    async fn collect(&self, claims: &[Lease], nodes: &[Node]) -> Result<(), kube::Error> {
        let live: BTreeSet<&str> = nodes
            .iter()
            .filter_map(|n| n.metadata.uid.as_deref())
            .collect();
        for claim in claims {
            let Some((name, uid)) = claim_owner(claim) else {
                continue;
            };
            if live.contains(uid) {
                continue;
            }
            let node = self.nodes.get_opt(name).await?;
            if node.is_some_and(|n| n.metadata.uid.as_deref() == Some(uid)) {
                continue;
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: claim.metadata.resource_version.clone(),
                    uid: claim.metadata.uid.clone(),
                }),
                ..DeleteParams::default()
            };
            let claim_name = claim.metadata.name.as_deref().unwrap_or("");
            match self.leases.delete(claim_name, &params).await {
                Ok(_) => tracing::info!(
                    claim = claim_name,
                    node = name,
                    "stale pod range claim deleted"
                ),
                Err(e) => tracing::debug!(claim = claim_name, "stale claim kept: {e}"),
            }
        }
        Ok(())
    }
}

impl NodeGate for NodeIpam {
    fn ready(&self, node: &str) -> bool {
        self.env.ipam().has_node_range(node)
    }

    fn prepare<'a>(
        &'a self,
        taken: &'a [String],
        unready: &'a [String],
    ) -> BoxFuture<'a, BTreeSet<String>> {
        Box::pin(self.prepare_nodes(taken, unready))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_index_no_block_covers() {
        assert_eq!(lowest_free(&mut [], 4), Some(0));
        assert_eq!(lowest_free(&mut [(0, 0), (1, 1)], 4), Some(2));
        assert_eq!(lowest_free(&mut [(2, 3), (0, 0)], 8), Some(1));
        // Overlapping and nested blocks.
        assert_eq!(
            lowest_free(&mut [(0, 5), (1, 2), (4, 6), (8, 9)], 16),
            Some(7)
        );
        assert_eq!(lowest_free(&mut [(0, 3)], 4), None);
        assert_eq!(lowest_free(&mut [(0, u32::MAX)], u32::MAX), None);
    }

    #[test]
    fn a_node_s_ranges_are_its_pod_cidrs_else_its_pod_cidr() {
        let node = |spec: serde_json::Value| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n"}, "spec": spec})).expect("node")
        };
        assert_eq!(
            pod_cidrs(&node(
                json!({"podCIDR": "10.0.0.0/24", "podCIDRs": ["10.0.0.0/24", "fd00::/80"]})
            )),
            ["10.0.0.0/24", "fd00::/80"]
        );
        assert_eq!(
            pod_cidrs(&node(json!({"podCIDR": "10.0.1.0/24"}))),
            ["10.0.1.0/24"]
        );
        assert!(pod_cidrs(&node(json!({}))).is_empty());
    }
}
