//! A job, the unit of work between the matcher and the workers, and the lanes it waits in.
//!
//! The lane numbers are kstage's own: the weighted queue serves the highest ready lane
//! first, and the lower lane keeps a guaranteed share of the workers (see
//! [`crate::queue`]), so fresh work goes first without starving retries. KWOK's queue has
//! no retry lane: a retry there waits behind every fresh job.

use std::sync::Arc;

use serde_json::Value;
use tokio::time::Instant;

use crate::cluster::ObjectKey;
use crate::stage::Stage;

/// The lane of jobs for a new version of an object.
pub const FRESH_LANE: u32 = 1;
/// The lane of retries: served after fresh work, but with a guaranteed share.
pub const RETRY_LANE: u32 = 0;

/// A Stage to play (or resume) on one object.
#[derive(Debug, Clone)]
pub struct Job {
    /// The object.
    pub key: ObjectKey,
    /// The object as the job will render it.
    pub object: Arc<Value>,
    /// The Stage.
    pub stage: Arc<Stage>,
    /// The step to run next.
    pub step: usize,
    /// How many times that step failed already.
    pub attempt: u32,
    /// When the job became due.
    pub due: Instant,
    /// What the Stage started from (the object's uid and resourceVersion, and the
    /// Stage), hashed when the job starts playing: its events' names derive from it.
    pub origin: u64,
    /// When the object was matched to the Stage, if the Stage had no delay of its own
    /// (`None`: it waited one). The loop guard follows chains of such plays.
    pub matched_back_to_back: Option<Instant>,
}

/// The seed of a Stage's event names: the object's uid and the resourceVersion it was
/// at when `stage` started playing on it. The same Stage played again from the same
/// version (after a restart, or by another replica) gets the same names.
pub fn event_origin(object: &Value, stage: &str) -> u64 {
    let field = |name: &str| crate::cluster::meta_str(object, name).unwrap_or("");
    fnv1a(&[field("uid"), field("resourceVersion"), stage])
}

/// The name of the Event step `step` of a Stage started from `origin` sends for the
/// object named `object`: `OBJECT.HASH` (16 hex digits), as kubelet's `NAME.HEX` names;
/// the object's name cut so the whole stays a valid name.
pub fn event_name(object: &str, origin: u64, step: usize) -> String {
    let hash = fnv1a(&[&format!("{origin:016x}"), &step.to_string()]);
    let mut prefix = object;
    while prefix.len() > 200 {
        let mut end = 200;
        while !prefix.is_char_boundary(end) {
            end -= 1;
        }
        prefix = &prefix[..end];
    }
    format!("{}.{hash:016x}", prefix.trim_end_matches(['.', '-']))
}

/// FNV-1a (64-bit) over `parts`, each followed by a 0 byte: stable across processes and
/// versions of kstage, unlike the standard library's hasher.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain(std::iter::once(0)) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

impl Job {
    /// The lane it waits in: fresh work, or a retry (a later step, or a failed attempt).
    pub(super) fn lane(&self) -> u32 {
        if self.step == 0 && self.attempt == 0 {
            FRESH_LANE
        } else {
            RETRY_LANE
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn event_names_derive_from_what_the_event_records() {
        let pod = json!({"metadata": {"name": "web-0", "uid": "u-1", "resourceVersion": "7"}});
        let origin = event_origin(&pod, "pod-ready");
        // Stable: the same in every process and version of kstage (FNV-1a, not the
        // standard library's randomly keyed hasher).
        assert_eq!(origin, event_origin(&pod.clone(), "pod-ready"));
        assert_eq!(
            event_name("web-0", origin, 0),
            event_name("web-0", origin, 0)
        );
        let name = event_name("web-0", origin, 0);
        assert!(
            name.starts_with("web-0.") && name.len() == "web-0.".len() + 16,
            "{name}"
        );
        // Each of uid, version, Stage and step makes another name.
        let other =
            |o: Value, stage: &str, step| event_name("web-0", event_origin(&o, stage), step);
        let names = [
            other(
                json!({"metadata": {"uid": "u-2", "resourceVersion": "7"}}),
                "pod-ready",
                0,
            ),
            other(
                json!({"metadata": {"uid": "u-1", "resourceVersion": "8"}}),
                "pod-ready",
                0,
            ),
            other(pod.clone(), "pod-delete", 0),
            other(pod.clone(), "pod-ready", 1),
        ];
        for n in &names {
            assert_ne!(*n, name);
        }
        // A long object name is cut to keep the Event's name valid (at most 253).
        let long = "a".repeat(253);
        assert!(event_name(&long, origin, 0).len() <= 253);
        // The hash of a known input, so a change of the scheme is a decision.
        assert_eq!(fnv1a(&["a"]), 0x089b_e207_b544_f1e4);
    }
}
