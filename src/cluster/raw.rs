//! Objects as kube-rs hands them to [`client`](super::client): their JSON, parsed once.
//!
//! kube-rs' `DynamicObject` parses `metadata` into a typed `ObjectMeta` (managed fields
//! included) and buffers the rest through a flattened map; the engine then needs the
//! whole object as a `serde_json::Value` again, so every watch event and every write's
//! answer was parsed twice and serialised once. [`RawObject`] is the `Value` itself,
//! without `metadata.managedFields` (no Stage reads them; on a real API server they are
//! often the larger half of the metadata), and the few metadata fields kube-rs' watcher
//! and requests read (name, namespace, resourceVersion, uid).

use kube::api::ObjectMeta;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A Kubernetes object of a kind known at run time.
#[derive(Debug, Clone, Default)]
pub struct RawObject {
    meta: ObjectMeta,
    value: Value,
}

impl RawObject {
    /// The object for `value` (its `metadata.managedFields` dropped).
    pub fn new(mut value: Value) -> Self {
        let metadata = value.get_mut("metadata").and_then(Value::as_object_mut);
        let mut meta = ObjectMeta::default();
        if let Some(metadata) = metadata {
            metadata.remove("managedFields");
            let text = |field: &str| {
                metadata
                    .get(field)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            };
            meta.name = text("name");
            meta.namespace = text("namespace");
            meta.resource_version = text("resourceVersion");
            meta.uid = text("uid");
        }
        Self { meta, value }
    }

    /// The object's JSON.
    pub fn into_value(self) -> Value {
        self.value
    }

    /// The object's JSON, with the `apiVersion` and `kind` it is served as (a real API
    /// server leaves them out of list items).
    pub fn into_typed(mut self, api_version: &str, kind: &str) -> Value {
        let Some(object) = self.value.as_object_mut() else {
            return self.value;
        };
        let mut set = |field: &str, value: &str| {
            if object.get(field).and_then(Value::as_str) != Some(value) {
                object.insert(field.into(), value.into());
            }
        };
        // A watch event's object has both already. (Objects are sorted maps, see
        // Cargo.toml: where the fields go is not ours to choose.)
        set("apiVersion", api_version);
        set("kind", kind);
        self.value
    }
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        if !value.is_object() {
            return Err(serde::de::Error::custom(
                "a Kubernetes object is a JSON object",
            ));
        }
        Ok(Self::new(value))
    }
}

impl Serialize for RawObject {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(serializer)
    }
}

/// `impl kube::Resource` for a type of a kind known at run time (an `ApiResource`), whose
/// `meta: ObjectMeta` field holds what kube-rs reads of the metadata.
macro_rules! dynamic_resource {
    ($type:ty) => {
        impl kube::core::Resource for $type {
            type DynamicType = kube::api::ApiResource;
            type Scope = kube::core::DynamicResourceScope;

            fn kind(dt: &kube::api::ApiResource) -> std::borrow::Cow<'_, str> {
                dt.kind.as_str().into()
            }

            fn group(dt: &kube::api::ApiResource) -> std::borrow::Cow<'_, str> {
                dt.group.as_str().into()
            }

            fn version(dt: &kube::api::ApiResource) -> std::borrow::Cow<'_, str> {
                dt.version.as_str().into()
            }

            fn api_version(dt: &kube::api::ApiResource) -> std::borrow::Cow<'_, str> {
                dt.api_version.as_str().into()
            }

            fn plural(dt: &kube::api::ApiResource) -> std::borrow::Cow<'_, str> {
                dt.plural.as_str().into()
            }

            fn meta(&self) -> &kube::api::ObjectMeta {
                &self.meta
            }

            fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
                &mut self.meta
            }
        }
    };
}
pub(crate) use dynamic_resource;

dynamic_resource!(RawObject);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use serde_json::json;

    #[test]
    fn a_raw_object_is_its_json_without_managed_fields() {
        let text = r#"{"metadata":{"name":"p","namespace":"ns","resourceVersion":"7","uid":"u",
            "managedFields":[{"manager":"m"}],"labels":{"a":"1"}},"spec":{"nodeName":"n"}}"#;
        let object: RawObject = serde_json::from_str(text).expect("parses");
        assert_eq!(object.name_any(), "p");
        assert_eq!(object.namespace().as_deref(), Some("ns"));
        assert_eq!(object.resource_version().as_deref(), Some("7"));
        assert_eq!(object.uid().as_deref(), Some("u"));
        assert_eq!(
            serde_json::to_value(&object).expect("serialises")["spec"],
            json!({"nodeName": "n"})
        );
        let typed = object.into_typed("v1", "Pod");
        assert_eq!(
            typed,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7", "uid": "u",
                    "labels": {"a": "1"}},
                "spec": {"nodeName": "n"}})
        );
        assert_eq!(
            typed.as_object().map(|o| o.keys().next().cloned()),
            Some(Some("apiVersion".into()))
        );
        // What the object said is not what it is served as: the watched resource wins.
        let wrong: RawObject =
            serde_json::from_str(r#"{"apiVersion":"v2","kind":"Other","metadata":{}}"#)
                .expect("parses");
        assert_eq!(
            wrong.into_typed("v1", "Pod"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}})
        );
        assert!(serde_json::from_str::<RawObject>("[1]").is_err());
    }
}
