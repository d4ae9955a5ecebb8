//! Node leases: with several kstage replicas, each node is played by exactly one of them,
//! the holder of its `coordination.k8s.io` Lease (in `kube-node-lease`, named after the
//! node, as the kubelet's).
//!
//! Every `duration / 4` the [`Leases`] loop renews the Lease that announces its replica
//! (`kstage-replica-IDENTITY`), counts the live replicas, and visits the managed nodes
//! for a fair share of them (managed nodes / replicas, rounded up): it renews up to that
//! many of its own, lets the rest expire for the others, and below its share creates a
//! missing Lease for itself or takes over one whose holder let it expire
//! (`renewTime + leaseDurationSeconds` in the past). Every write carries the
//! resourceVersion it read, so two replicas racing for a Lease cannot both win. The set
//! of nodes held is published on a `watch` channel; the cluster adapter delivers only the
//! objects of held nodes to the engine (and reports the objects of a node it lost as
//! gone, so their queued work is cancelled). A [`NodeGate`] prepares a node just won
//! before it is published (its pod range and its pods' addresses: see
//! [`crate::node_ipam`]).

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use futures_util::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::sync::watch;

use crate::clock::Clock;

/// The namespace of node Leases.
pub const NAMESPACE: &str = "kube-node-lease";

/// The name prefix of the Lease each replica holds to announce itself.
pub const REPLICA_PREFIX: &str = "kstage-replica-";

/// How leases are held.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Who this replica is (`holderIdentity`).
    pub identity: String,
    /// `leaseDurationSeconds`; renewed every quarter of it.
    pub duration: Duration,
}

pub use crate::cluster::managed::HeldNodes;

/// What a replica does to the nodes it holds before it plays them.
pub trait NodeGate: Send + Sync + std::fmt::Debug {
    /// Whether a node held and played needs [`NodeGate::prepare`] again.
    fn ready(&self, node: &str) -> bool;

    /// Prepare the nodes `taken` (just won) and `unready` (played already, not
    /// [`ready`](NodeGate::ready)). Returns the nodes of `taken` that may be played;
    /// the others are tried again at the next round.
    fn prepare<'a>(
        &'a self,
        taken: &'a [String],
        unready: &'a [String],
    ) -> BoxFuture<'a, BTreeSet<String>>;
}

/// The lease loop of one replica.
#[derive(Debug)]
pub struct Leases {
    api: Api<Lease>,
    config: LeaseConfig,
    clock: Arc<dyn Clock>,
    held: watch::Sender<BTreeSet<String>>,
    gate: Option<Arc<dyn NodeGate>>,
}

fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

impl Leases {
    /// A lease loop through `client`; [`Leases::held`] tells what it holds.
    pub fn new(client: kube::Client, config: LeaseConfig, clock: Arc<dyn Clock>) -> Self {
        Self {
            api: Api::namespaced(client, NAMESPACE),
            config,
            clock,
            held: watch::Sender::new(BTreeSet::new()),
            gate: None,
        }
    }

    /// Play a node won only once `gate` prepared it.
    #[must_use]
    pub fn with_gate(mut self, gate: Arc<dyn NodeGate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The nodes held, updated as leases are won and lost.
    pub fn held(&self) -> HeldNodes {
        self.held.subscribe()
    }

    /// Hold the leases of `nodes` (the managed nodes, as they change) until dropped.
    pub async fn run(self, nodes: watch::Receiver<BTreeSet<String>>) {
        self.run_until(nodes, std::future::pending()).await;
    }

    /// [`Leases::run`] until `stop` completes, then release every Lease held (see
    /// [`Leases::release`]).
    pub async fn run_until(
        self,
        mut nodes: watch::Receiver<BTreeSet<String>>,
        stop: impl Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        let every = self.config.duration / 4;
        let presence = format!("{REPLICA_PREFIX}{}", self.config.identity);
        loop {
            let candidates = nodes.borrow_and_update().clone();
            // Announce this replica, and take a fair share of the nodes: keep (renew) at
            // most that many of those held, let the rest expire for the others, and take
            // free or expired ones while below it.
            self.hold(&presence).await;
            let replicas = self.live_replicas().await.max(1);
            let share = candidates.len().div_ceil(replicas);
            let before = self.held.borrow().clone();
            let mut held = BTreeSet::new();
            for node in candidates.iter().filter(|n| before.contains(*n)) {
                if held.len() < share && self.hold(node).await {
                    held.insert(node.clone());
                }
            }
            for node in candidates.iter().filter(|n| !before.contains(*n)) {
                if held.len() >= share {
                    break;
                }
                if self.hold(node).await {
                    held.insert(node.clone());
                }
            }
            let held = self.prepared(held, &before).await;
            self.held.send_if_modified(|current| {
                let changed = *current != held;
                *current = held;
                changed
            });
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                changed = nodes.changed() => if changed.is_err() { return },
                () = &mut stop => {
                    self.release().await;
                    return;
                }
            }
        }
    }

    /// The nodes of `held` that may be played: those of `before` (played already; the
    /// gate prepares again those not ready) and those the gate prepared.
    async fn prepared(
        &self,
        mut held: BTreeSet<String>,
        before: &BTreeSet<String>,
    ) -> BTreeSet<String> {
        let Some(gate) = &self.gate else {
            return held;
        };
        let taken: Vec<String> = held
            .iter()
            .filter(|n| !before.contains(*n))
            .cloned()
            .collect();
        let unready: Vec<String> = held
            .iter()
            .filter(|n| before.contains(*n) && !gate.ready(n))
            .cloned()
            .collect();
        if taken.is_empty() && unready.is_empty() {
            return held;
        }
        let prepared = gate.prepare(&taken, &unready).await;
        held.retain(|n| before.contains(n) || prepared.contains(n));
        held
    }

    /// Let go of every Lease this replica holds, so the others take its nodes at their
    /// next round instead of after a lease duration: a node's Lease is left without a
    /// holder (as client-go's leader election releases), the replica's own Lease is
    /// deleted (it no longer counts among the live replicas). Each write carries the
    /// resourceVersion read, so a Lease another replica took meanwhile is left alone.
    pub async fn release(&self) {
        let held = self.held.borrow().clone();
        for node in &held {
            let Ok(Some(lease)) = self.api.get_opt(node).await else {
                continue;
            };
            let mut spec = lease.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(&self.config.identity) {
                continue;
            }
            spec.holder_identity = None;
            let released = Lease {
                metadata: lease.metadata.clone(),
                spec: Some(spec),
            };
            if let Err(e) = self
                .api
                .replace(node, &PostParams::default(), &released)
                .await
            {
                tracing::warn!(node, "cannot release the node's Lease: {e}");
            }
        }
        self.held.send_replace(BTreeSet::new());
        let presence = format!("{REPLICA_PREFIX}{}", self.config.identity);
        if let Ok(Some(lease)) = self.api.get_opt(&presence).await {
            let params = kube::api::DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    resource_version: lease.metadata.resource_version.clone(),
                    uid: lease.metadata.uid.clone(),
                }),
                ..Default::default()
            };
            if let Err(e) = self.api.delete(&presence, &params).await {
                tracing::warn!(lease = presence, "cannot delete this replica's Lease: {e}");
            }
        }
        tracing::info!(nodes = held.len(), "node Leases released");
    }

    /// How many replicas announce themselves with a Lease that has not expired.
    async fn live_replicas(&self) -> usize {
        let Ok(list) = self.api.list(&kube::api::ListParams::default()).await else {
            return 1;
        };
        let now = self.clock.now();
        list.items
            .iter()
            .filter(|l| {
                l.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(REPLICA_PREFIX))
            })
            .filter(|l| !expired(l, now))
            .count()
    }

    /// Create, renew or take over the Lease of `node`; whether this replica holds it.
    async fn hold(&self, node: &str) -> bool {
        let now = self.clock.now();
        let seconds = self.config.duration.as_secs().max(1);
        let mine = |rv: Option<String>, transitions: i64, acquired: Option<String>| -> Lease {
            let value = json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node, "namespace": NAMESPACE, "resourceVersion": rv},
                "spec": {
                    "holderIdentity": self.config.identity,
                    "leaseDurationSeconds": seconds,
                    "acquireTime": acquired.unwrap_or_else(|| timestamp(now)),
                    "renewTime": timestamp(now),
                    "leaseTransitions": transitions,
                },
            });
            serde_json::from_value(value).unwrap_or_default()
        };
        let lease = match self.api.get_opt(node).await {
            Ok(Some(lease)) => lease,
            Ok(None) => {
                return self
                    .api
                    .create(&PostParams::default(), &mine(None, 0, None))
                    .await
                    .is_ok();
            }
            Err(e) => {
                tracing::debug!(node, "cannot read the node's Lease: {e}");
                return false;
            }
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.as_deref().unwrap_or("");
        let rv = lease.metadata.resource_version.clone();
        let transitions = i64::from(spec.lease_transitions.unwrap_or(0));
        let acquired = spec.acquire_time.as_ref().map(|t| t.0.to_string());
        let expired = expired(&lease, now);
        let next = if holder == self.config.identity {
            mine(rv, transitions, acquired)
        } else if expired || holder.is_empty() {
            tracing::info!(node, from = holder, "taking over an expired node Lease");
            mine(rv, transitions + 1, None)
        } else {
            return false;
        };
        self.api
            .replace(node, &PostParams::default(), &next)
            .await
            .is_ok()
    }
}

/// Whether a Lease's holder let it expire (or it never had one).
fn expired(lease: &Lease, now: DateTime<Utc>) -> bool {
    let Some(spec) = &lease.spec else {
        return true;
    };
    match (spec.renew_time.as_ref(), spec.lease_duration_seconds) {
        (Some(renewed), Some(d)) => {
            let renewed: DateTime<Utc> = renewed.0.to_string().parse().unwrap_or(now);
            renewed + chrono::TimeDelta::seconds(i64::from(d)) < now
        }
        _ => true,
    }
}
