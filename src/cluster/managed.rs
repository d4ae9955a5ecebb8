//! Which nodes and pods kstage manages, as KWOK decides it: all nodes, the nodes matching
//! a label or an annotation selector, or one named node; pods bound to managed nodes.
//!
//! A single node is selected on the server (`metadata.name` for nodes, `spec.nodeName`
//! for pods); a label selector on the server for nodes; an annotation selector on the
//! client. With a label or annotation selection, pods are filtered on the client by
//! their node: [`PodGate`] keeps the pods of nodes not (yet) managed aside and delivers
//! them when their node becomes managed, so none is missed. With all nodes managed, every
//! pod is (as before any selection existed; unscheduled pods included, so Stages can
//! bind them).
//!
//! Other kinds are managed as their Stages' `resourceRef` names them, optionally narrowed
//! by a label selector per kind ([`ObjectSelectors`], applied by the server).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use super::labels::{LabelSelector, SelectorError};
use super::{ObjectKey, WatchEvent};

/// The nodes kstage manages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ManagedNodes {
    /// Every node (and every pod).
    #[default]
    All,
    /// Nodes whose labels match (Kubernetes selector syntax).
    Labels(String),
    /// Nodes whose annotations match (the same syntax, on annotations), parsed once.
    Annotations(LabelSelector),
    /// One node by name.
    Single(String),
}

impl ManagedNodes {
    /// Nodes whose labels match `selector` (checked here, applied by the server).
    pub fn labels(selector: &str) -> Result<Self, SelectorError> {
        LabelSelector::parse(selector)?;
        Ok(ManagedNodes::Labels(selector.to_owned()))
    }

    /// Nodes whose annotations match `selector`.
    pub fn annotations(selector: &str) -> Result<Self, SelectorError> {
        LabelSelector::parse(selector).map(ManagedNodes::Annotations)
    }

    /// The server-side selectors of the node watch: (labels, fields).
    pub fn node_selectors(&self) -> (Option<&str>, Option<String>) {
        match self {
            ManagedNodes::Labels(s) => (Some(s), None),
            ManagedNodes::Single(name) => (None, Some(format!("metadata.name={name}"))),
            _ => (None, None),
        }
    }

    /// The server-side field selector of the pod watch.
    pub fn pod_fields(&self) -> Option<String> {
        match self {
            ManagedNodes::Single(name) => Some(format!("spec.nodeName={name}")),
            _ => None,
        }
    }

    /// Whether pods must be filtered on the client by their node.
    pub fn gates_pods(&self) -> bool {
        matches!(self, ManagedNodes::Labels(_) | ManagedNodes::Annotations(_))
    }

    /// Whether a node (delivered by the node watch) is managed.
    pub fn node_matches(&self, node: &Value) -> bool {
        match self {
            ManagedNodes::Annotations(selector) => {
                selector.matches_map(node.pointer("/metadata/annotations"))
            }
            // The server already selected.
            _ => true,
        }
    }
}

fn node_name_of(pod: &Value) -> &str {
    pod.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn name_of(node: &Value) -> String {
    node.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// Pods let through by their node, with the pods of other nodes kept aside.
#[derive(Debug, Default)]
pub struct PodGate {
    managed: HashSet<String>,
    aside: HashMap<String, BTreeMap<ObjectKey, Arc<Value>>>,
}

impl PodGate {
    /// A node watch event: the pods it lets through (those of a node that became
    /// managed).
    pub fn node_event(&mut self, selection: &ManagedNodes, event: &WatchEvent) -> Vec<Arc<Value>> {
        let mut released = Vec::new();
        let mut take = |gate: &mut Self, node: &Value| {
            let name = name_of(node);
            if selection.node_matches(node) {
                if gate.managed.insert(name.clone())
                    && let Some(pods) = gate.aside.remove(&name)
                {
                    released.extend(pods.into_values());
                }
            } else {
                gate.managed.remove(&name);
            }
        };
        match event {
            WatchEvent::Applied(node) => take(self, node),
            WatchEvent::Deleted(node) => {
                self.managed.remove(&name_of(node));
            }
            WatchEvent::Restarted(nodes) => {
                let present: HashSet<String> = nodes.iter().map(|n| name_of(n)).collect();
                self.managed.retain(|n| present.contains(n));
                for node in nodes {
                    take(self, node);
                }
            }
        }
        released
    }

    fn admit(&mut self, pod: Arc<Value>) -> Option<Arc<Value>> {
        let node = node_name_of(&pod).to_owned();
        if self.managed.contains(&node) {
            return Some(pod);
        }
        if let Some(key) = ObjectKey::of(&pod) {
            self.aside.entry(node).or_default().insert(key, pod);
        }
        None
    }

    fn forget(&mut self, pod: &Value) {
        if let (Some(key), Some(aside)) =
            (ObjectKey::of(pod), self.aside.get_mut(node_name_of(pod)))
        {
            aside.remove(&key);
        }
    }

    /// A pod watch event: what the engine sees of it, if anything.
    pub fn pod_event(&mut self, event: WatchEvent) -> Option<WatchEvent> {
        match event {
            WatchEvent::Applied(pod) => {
                // A pod may move from aside to managed when it is bound.
                self.forget(&pod);
                self.admit(pod).map(WatchEvent::Applied)
            }
            WatchEvent::Deleted(pod) => {
                self.forget(&pod);
                self.managed
                    .contains(node_name_of(&pod))
                    .then_some(WatchEvent::Deleted(pod))
            }
            WatchEvent::Restarted(pods) => {
                self.aside.clear();
                let managed = pods.into_iter().filter_map(|p| self.admit(p)).collect();
                Some(WatchEvent::Restarted(managed))
            }
        }
    }
}

/// Label selectors narrowing the objects of some kinds (`--object-selector
/// KIND[.GROUP]=SELECTOR`); kinds without one are watched whole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectSelectors(Vec<ObjectSelector>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct ObjectSelector {
    kind: String,
    /// The API group (`""` for the core group); `None` matches any group.
    group: Option<String>,
    labels: String,
}

impl ObjectSelectors {
    /// Parses `KIND[.GROUP]=SELECTOR` (`Deployment.apps=app=web`, `Pod=tier in (a,b)`,
    /// `ConfigMap.=x`: a trailing dot is the core group). Nodes have their own flags.
    ///
    /// # Errors
    /// The text and what is wrong with it.
    pub fn add(&mut self, text: &str) -> Result<(), String> {
        let (target, labels) = text
            .split_once('=')
            .ok_or_else(|| format!("{text:?}: expected KIND[.GROUP]=SELECTOR"))?;
        let (kind, group) = match target.split_once('.') {
            Some((kind, group)) => (kind, Some(group.to_owned())),
            None => (target, None),
        };
        if kind.is_empty() || !kind.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(format!(
                "{text:?}: {kind:?} is not a kind (e.g. Deployment.apps)"
            ));
        }
        if kind == "Node" && group.as_deref().is_none_or(str::is_empty) {
            return Err(format!(
                "{text:?}: nodes are selected with --manage-nodes-with-label-selector"
            ));
        }
        LabelSelector::parse(labels).map_err(|e| format!("{text:?}: {e}"))?;
        let overlaps = |s: &ObjectSelector| {
            s.kind == kind && (s.group.is_none() || group.is_none() || s.group == group)
        };
        if self.0.iter().any(overlaps) {
            return Err(format!("{text:?}: a second selector for the same kind"));
        }
        self.0.push(ObjectSelector {
            kind: kind.to_owned(),
            group,
            labels: labels.to_owned(),
        });
        Ok(())
    }

    /// The label selector of the objects of `kind` in `api_version` (`apps/v1`, `v1`).
    pub fn labels(&self, api_version: &str, kind: &str) -> Option<&str> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        self.0
            .iter()
            .find(|s| s.kind == kind && s.group.as_deref().is_none_or(|g| g == group))
            .map(|s| s.labels.as_str())
    }
}

/// The names of the nodes a replica holds (by node Lease), kept current by the lease
/// loop: watches of nodes and pods are gated by it.
pub type HeldNodes = tokio::sync::watch::Receiver<BTreeSet<String>>;

/// Publish the managed nodes seen by a node watch (to the node lease loop): the names of
/// the nodes in `events` that `selection` manages, kept current.
pub async fn track_nodes(
    mut events: impl futures_util::Stream<Item = WatchEvent> + Unpin,
    selection: ManagedNodes,
    out: tokio::sync::watch::Sender<BTreeSet<String>>,
) {
    use futures_util::StreamExt as _;
    let name = |n: &serde_json::Value| {
        n.pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let mut nodes: HashSet<String> = HashSet::new();
    while let Some(event) = events.next().await {
        match event {
            WatchEvent::Applied(n) if selection.node_matches(&n) => {
                nodes.insert(name(&n));
            }
            WatchEvent::Applied(n) | WatchEvent::Deleted(n) => {
                nodes.remove(&name(&n));
            }
            WatchEvent::Restarted(all) => {
                nodes = all
                    .iter()
                    .filter(|n| selection.node_matches(n))
                    .map(|n| name(n))
                    .collect();
            }
        }
        let current: BTreeSet<String> = nodes.iter().cloned().collect();
        out.send_if_modified(|old| {
            let changed = *old != current;
            *old = current;
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(name: &str, pool: &str) -> Arc<Value> {
        Arc::new(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": {"pool": pool}}}),
        )
    }

    fn pod(name: &str, node: &str) -> Arc<Value> {
        Arc::new(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": {"nodeName": node}}),
        )
    }

    fn names(pods: &[Arc<Value>]) -> Vec<String> {
        pods.iter().map(|p| name_of(p)).collect()
    }

    #[test]
    fn pods_of_unmanaged_nodes_wait_until_their_node_is_managed() {
        let selection = ManagedNodes::annotations("pool=fake").expect("selector");
        let mut gate = PodGate::default();
        assert!(
            gate.node_event(
                &selection,
                &WatchEvent::Restarted(vec![node("a", "fake"), node("b", "real")])
            )
            .is_empty()
        );
        let Some(WatchEvent::Restarted(seen)) = gate.pod_event(WatchEvent::Restarted(vec![
            pod("p1", "a"),
            pod("p2", "b"),
            pod("p3", "b"),
        ])) else {
            panic!("restarted")
        };
        assert_eq!(names(&seen), ["p1"]);
        assert!(
            gate.pod_event(WatchEvent::Applied(pod("p4", "b")))
                .is_none()
        );
        assert!(
            gate.pod_event(WatchEvent::Deleted(pod("p3", "b")))
                .is_none()
        );
        // Node b becomes managed: its pods (p2, p4; p3 went) are delivered.
        let released = gate.node_event(&selection, &WatchEvent::Applied(node("b", "fake")));
        assert_eq!(names(&released), ["p2", "p4"]);
        assert!(matches!(
            gate.pod_event(WatchEvent::Applied(pod("p5", "b"))),
            Some(WatchEvent::Applied(_))
        ));
        // A pod bound later to a managed node gets through.
        assert!(gate.pod_event(WatchEvent::Applied(pod("p6", ""))).is_none());
        assert!(
            gate.pod_event(WatchEvent::Applied(pod("p6", "a")))
                .is_some()
        );
        // Node a leaves the selection: its pods' events stop.
        gate.node_event(&selection, &WatchEvent::Applied(node("a", "real")));
        assert!(
            gate.pod_event(WatchEvent::Applied(pod("p1", "a")))
                .is_none()
        );
    }

    #[test]
    fn selections_map_to_server_selectors() {
        let single = ManagedNodes::Single("n1".into());
        assert_eq!(
            single.node_selectors(),
            (None, Some("metadata.name=n1".into()))
        );
        assert_eq!(single.pod_fields().as_deref(), Some("spec.nodeName=n1"));
        assert!(!single.gates_pods());
        let labels = ManagedNodes::labels("type=kwok").expect("selector");
        assert_eq!(labels.node_selectors(), (Some("type=kwok"), None));
        assert!(labels.gates_pods());
        assert!(ManagedNodes::labels("a in b").is_err());
        assert!(ManagedNodes::annotations("a in b").is_err());
        assert!(ManagedNodes::All.node_matches(&node("x", "y")));
    }

    #[test]
    fn object_selectors_parse_and_match_kind_and_group() {
        let mut sel = ObjectSelectors::default();
        sel.add("Deployment.apps=app=web,tier!=db").expect("valid");
        sel.add("ConfigMap.=kstage.dev/play").expect("valid");
        sel.add("Widget=size in (s,m)").expect("valid");
        assert_eq!(
            sel.labels("apps/v1", "Deployment"),
            Some("app=web,tier!=db")
        );
        assert_eq!(sel.labels("extensions/v1beta1", "Deployment"), None);
        assert_eq!(sel.labels("v1", "ConfigMap"), Some("kstage.dev/play"));
        assert_eq!(
            sel.labels("example.com/v1", "Widget"),
            Some("size in (s,m)")
        );
        assert_eq!(sel.labels("v1", "Pod"), None);
        for bad in [
            "Deployment",
            "=app=web",
            "Deploy ment=app",
            "Node=role=x",
            "Widget=a in",
            "Widget.example.com=a",
        ] {
            assert!(sel.add(bad).is_err(), "{bad}");
        }
    }
}
