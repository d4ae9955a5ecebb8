//! A journal of what the engine did, in order: the timeline `kstage sim` prints.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::cluster::ObjectKey;

/// What happened at one point of time.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Time since the journal started.
    pub at: Duration,
    /// The object.
    pub object: ObjectKey,
    /// What happened.
    pub what: What,
}

/// The kinds of entries.
#[derive(Debug, Clone, PartialEq)]
pub enum What {
    /// The object was created (by the simulation's input).
    Created,
    /// A user deleted the object.
    UserDelete {
        /// Whether it is gone (else it is terminating).
        removed: bool,
    },
    /// A Stage was played, to its end or until a step failed.
    Stage {
        /// Its name.
        name: String,
        /// What its steps did.
        actions: Vec<Done>,
        /// Why it stopped early and what happens next, if it did.
        error: Option<String>,
    },
}

/// One action of a played Stage and its effect.
#[derive(Debug, Clone, PartialEq)]
pub struct Done {
    /// `event`, `patch`, `apply` or `delete`.
    pub kind: &'static str,
    /// A one-line description.
    pub detail: String,
    /// False when the write changed nothing (a no-op is not sent).
    pub changed: bool,
}

/// The journal: entries appended by the engine and its driver.
#[derive(Debug)]
pub struct Journal {
    origin: tokio::time::Instant,
    entries: Mutex<Vec<Entry>>,
}

impl Default for Journal {
    fn default() -> Self {
        Self::new()
    }
}

impl Journal {
    /// An empty journal whose times count from now (tokio time).
    pub fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
            entries: Mutex::new(Vec::new()),
        }
    }

    /// Append an entry stamped with the current time.
    pub fn record(&self, object: ObjectKey, what: What) {
        let at = self.origin.elapsed();
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Entry { at, object, what });
    }

    /// Every entry so far, in the order recorded.
    pub fn entries(&self) -> Vec<Entry> {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Take every entry, leaving the journal empty.
    pub fn take(&self) -> Vec<Entry> {
        std::mem::take(&mut *self.entries.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
