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
