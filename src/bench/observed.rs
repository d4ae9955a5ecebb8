//! Objects as the load generator reads them: the fields it times, the rest skipped
//! unparsed.
//!
//! The load generator shares the machine (and in-process, the runtime) with the engine
//! it measures; parsing every pod of every watch event and every answer in full made it
//! compete with the engine for the cores. An [`Observed`] object parses its name and
//! resourceVersion (kube-rs' watcher needs them), whether a node is Ready and whether a
//! pod is Running; serde skips everything else.

use kube::api::ObjectMeta;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::cluster::raw::dynamic_resource;

/// A benchmark object: one to send, or what was read of one.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    meta: ObjectMeta,
    /// A node's `Ready` condition is `True`.
    pub ready: bool,
    /// A pod's phase is `Running`.
    pub running: bool,
    /// The object to create; `None` for one read from the server.
    body: Option<Value>,
}

dynamic_resource!(Observed);

impl Observed {
    /// An object to create.
    pub fn to_send(body: Value) -> Self {
        let name = body
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Self {
            meta: ObjectMeta {
                name,
                ..ObjectMeta::default()
            },
            body: Some(body),
            ..Self::default()
        }
    }

    /// The object's name ("" when it has none).
    pub fn name(&self) -> &str {
        self.meta.name.as_deref().unwrap_or("")
    }
}

impl Serialize for Observed {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.body {
            Some(body) => body.serialize(serializer),
            None => Err(serde::ser::Error::custom(
                "an object read by the benchmark is never sent back",
            )),
        }
    }
}

#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: WireMeta,
    #[serde(default)]
    status: WireStatus,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
}

#[derive(Deserialize, Default)]
struct WireStatus {
    phase: Option<String>,
    #[serde(default)]
    conditions: Vec<WireCondition>,
}

#[derive(Deserialize)]
struct WireCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

impl<'de> Deserialize<'de> for Observed {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        Ok(Self {
            meta: ObjectMeta {
                name: wire.metadata.name,
                namespace: wire.metadata.namespace,
                resource_version: wire.metadata.resource_version,
                ..ObjectMeta::default()
            },
            ready: wire
                .status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True"),
            running: wire.status.phase.as_deref() == Some("Running"),
            body: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use serde_json::json;

    #[test]
    fn an_observed_object_keeps_what_the_benchmark_times() {
        let node: Observed = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n", "resourceVersion": "9", "labels": {"a": "b"}},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady"}
            ], "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}
        }))
        .expect("parses");
        assert_eq!(
            (node.name(), node.resource_version().as_deref()),
            ("n", Some("9"))
        );
        assert!(node.ready && !node.running);
        let pod: Observed = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
        }))
        .expect("parses");
        assert!(pod.running && !pod.ready);
        assert_eq!(pod.namespace().as_deref(), Some("ns"));
        let bare: Observed = serde_json::from_str(r#"{"metadata":{"name":"x"}}"#).expect("parses");
        assert!(!bare.ready && !bare.running);
        // What is read is never written back; what is sent is sent whole.
        assert!(serde_json::to_value(&bare).is_err());
        let body = json!({"metadata": {"name": "s"}, "spec": {"x": 1}});
        let sent = Observed::to_send(body.clone());
        assert_eq!(sent.name(), "s");
        assert_eq!(serde_json::to_value(&sent).expect("serialises"), body);
    }
}
