//! The applier: sends one action of a step to the cluster and says what it did to the
//! object (a new version, gone, nothing), skipping patches that would change nothing.

use std::sync::Arc;

use serde_json::Value;

use super::{Engine, Metrics};
use crate::action::Action;
use crate::cluster::event::Involved;
use crate::cluster::{Cluster, ClusterError, EventRequest, ObjectKey, PatchRequest};
use crate::patch;

/// What one action did to the object.
pub(super) enum Sent {
    Object(Arc<Value>),
    Gone,
    Nothing,
}

impl<C: Cluster> Engine<C> {
    /// Send one action of a step for `key` (`object` is its version the step rendered):
    /// what it did to the object. A patch that would change nothing is not sent where the
    /// cluster is remote (no-op detection).
    pub(super) async fn send(
        &self,
        key: &ObjectKey,
        object: &Value,
        action: Action,
        event_name: Option<String>,
    ) -> Result<Sent, ClusterError> {
        match action {
            Action::Event {
                event_type,
                reason,
                message,
            } => {
                let event = EventRequest {
                    event_type,
                    reason,
                    message,
                    name: event_name,
                    involved: Involved::of(key, object),
                };
                self.cluster.event(key, &event).await?;
                Metrics::bump(&self.metrics.events);
                Ok(Sent::Nothing)
            }
            Action::Patch {
                patch_type,
                subresource,
                data,
                impersonation,
            } => {
                // No-op detection: a patch that would change nothing is not sent (where
                // the cluster itself skips no-op writes, its answer tells the same).
                if !self.cluster.cheap_noop_writes()
                    && !patch::changes(object, patch_type, &data, &key.kind).unwrap_or(true)
                {
                    Metrics::bump(&self.metrics.noops);
                    return Ok(Sent::Nothing);
                }
                let request = PatchRequest {
                    patch_type,
                    subresource: subresource.as_deref(),
                    data,
                    as_user: impersonation.as_deref(),
                };
                let stored = self.cluster.patch(key, request).await?;
                Metrics::bump(&self.metrics.writes);
                // A patch that removed the last finalizer of a terminating object
                // released it: the server removed it, and the Stage goes on as after a
                // delete (only its events are still sent).
                if crate::cluster::is_released(&stored) {
                    Ok(Sent::Gone)
                } else {
                    Ok(Sent::Object(stored))
                }
            }
            Action::Apply {
                patch_type,
                subresource,
                object: applied,
                impersonation,
            } => {
                let stored = self
                    .cluster
                    .apply(
                        &applied,
                        patch_type,
                        subresource.as_deref(),
                        impersonation.as_deref(),
                    )
                    .await?;
                Metrics::bump(&self.metrics.writes);
                if ObjectKey::of(&stored).as_ref() == Some(key) {
                    Ok(Sent::Object(stored))
                } else {
                    Ok(Sent::Nothing)
                }
            }
            Action::Delete => match self.cluster.delete(key, Some(0)).await {
                Ok(left) => {
                    Metrics::bump(&self.metrics.writes);
                    Ok(left.map_or(Sent::Gone, Sent::Object))
                }
                // Gone already (released by an earlier write, or deleted by someone
                // else): what the step wanted, as KWOK takes it.
                Err(e) if e.is_not_found() => Ok(Sent::Gone),
                Err(e) => Err(e),
            },
        }
    }
}
