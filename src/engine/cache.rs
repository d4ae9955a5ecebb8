//! The object cache: the newest version the engine has seen of every watched object
//! ([`Seen`]), held weakly where the cluster keeps every object itself (the in-memory
//! store) and packed (LZ4-compressed compact JSON) where it does not (a remote API
//! server), and parsed again only when a Stage needs it.

use std::sync::{Arc, Weak};

use serde_json::Value;

use super::reentry::Reentry;

/// The newest version seen of an object. Held weakly when the cluster keeps every
/// object it reports (the in-memory store: then it can write an object's next version
/// without copying it, being its only holder), packed otherwise (a remote API server:
/// the engine's copy is the only one in this process, and a parsed object takes ~8 times
/// the memory of its compact JSON: 100,000 pods would need a gigabyte).
#[derive(Debug)]
pub(super) struct Seen {
    pub(super) resource_version: Option<String>,
    pub(super) object: Held,
    /// The Stage it played last, and how often lately (kept across versions).
    pub(super) reentry: Reentry,
    /// A Stage deleted it, or the server said it is gone: the versions still on their way
    /// from the watch are echoes of writes before the deletion, not news, and are not
    /// matched (they would replay a Stage from its first step on an object that no
    /// longer exists). A watch delivers one object's events in order, so its deletion
    /// (or a relist, which cannot hold it) comes after all of them and ends this.
    pub(super) deleted: bool,
}

#[derive(Debug)]
pub(super) enum Held {
    Weak(Weak<Value>),
    /// Compressed compact JSON, parsed again when a Stage needs the object.
    Packed(Arc<[u8]>),
}

impl Held {
    /// Whether the object is still there (a dead `Weak` means a newer version or the
    /// deletion is on its way), without parsing it.
    pub(super) fn is_live(&self) -> bool {
        match self {
            Held::Weak(w) => w.strong_count() > 0,
            Held::Packed(_) => true,
        }
    }

    /// The object (parsed again when packed).
    pub(super) fn upgrade(&self) -> Option<Arc<Value>> {
        match self {
            Held::Weak(w) => w.upgrade(),
            Held::Packed(bytes) => unpack(bytes),
        }
    }
}

/// An object as compact JSON, LZ4-compressed (a pod's JSON shrinks to about half: keys
/// and timestamps repeat).
pub(super) fn pack(object: &Value) -> Arc<[u8]> {
    // Serialising a `Value` cannot fail (its keys are strings).
    let json = serde_json::to_vec(object).unwrap_or_default();
    lz4_flex::compress_prepend_size(&json).into()
}

pub(super) fn unpack(bytes: &[u8]) -> Option<Arc<Value>> {
    let parsed = lz4_flex::decompress_size_prepended(bytes)
        .map_err(|e| e.to_string())
        .and_then(|json| serde_json::from_slice(&json).map_err(|e| e.to_string()));
    match parsed {
        Ok(value) => Some(Arc::new(value)),
        Err(e) => {
            // Written by `pack`: cannot fail.
            tracing::error!(error = %e, "a packed object does not unpack");
            None
        }
    }
}

impl Seen {
    /// Whether this is a packed version and `object` is a parsed copy of it (a version
    /// without a resourceVersion is never taken for another).
    pub(super) fn packs(&self, object: &Value) -> bool {
        matches!(self.object, Held::Packed(_))
            && self.resource_version.is_some()
            && self.resource_version.as_deref() == resource_version(object)
    }

    /// The object, taking `same` (a copy the caller holds) when it is this version; a
    /// packed one is parsed by [`Latest::get`], after the caller let go of its lock.
    pub(super) fn latest(&self, same: &Arc<Value>) -> Latest {
        match &self.object {
            Held::Packed(_) if self.packs(same) => Latest::Object(Some(same.clone())),
            Held::Packed(bytes) => Latest::Packed(bytes.clone()),
            Held::Weak(w) => Latest::Object(w.upgrade()),
        }
    }
}

/// An object's newest version, maybe still packed.
pub(super) enum Latest {
    Object(Option<Arc<Value>>),
    Packed(Arc<[u8]>),
}

impl Latest {
    pub(super) fn get(self) -> Option<Arc<Value>> {
        match self {
            Latest::Object(object) => object,
            Latest::Packed(bytes) => unpack(&bytes),
        }
    }
}

/// `metadata.resourceVersion` of an object.
pub(super) fn resource_version(object: &Value) -> Option<&str> {
    crate::cluster::meta_str(object, "resourceVersion")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_object_unpacks_to_itself_in_less_space() {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "resourceVersion": "7",
                "labels": {"b": "2", "a": "1"}},
            "status": {"conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ], "podIP": "10.0.0.1", "phase": "Running"},
        });
        let packed = pack(&pod);
        let back = unpack(&packed).expect("unpacks");
        assert_eq!(*back, pod);
        // Byte for byte: the same text is written back.
        assert_eq!(back.to_string(), pod.to_string());
        assert!(
            packed.len() < pod.to_string().len(),
            "{} bytes",
            packed.len()
        );
        assert!(unpack(b"garbage").is_none());
    }
}
