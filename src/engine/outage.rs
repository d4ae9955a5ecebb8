//! What the log says while the API server cannot be reached: one warning when steps start
//! failing for want of it, and one line when a request gets through again, saying how
//! long it was out and how many steps waited. Each failed step itself is a debug line
//! (it is retried: an outage of 20 s under load would otherwise write a thousand lines).
//!
//! "Cannot be reached" is a failure of the connection (refused, reset, closed, timed
//! out) or an answer that says the server cannot serve now (429, 500, 502, 503, 504).
//! Anything else is about the request, not the server, and is not counted here.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::lock;
use crate::cluster::{ClusterError, ObjectKey};
use crate::retry::FailureKind;

/// The current outage, if any.
#[derive(Debug, Default)]
pub(super) struct Outage {
    /// Whether `state` holds an outage (read on every successful write: no lock then).
    active: AtomicBool,
    state: Mutex<Option<Out>>,
}

#[derive(Debug)]
struct Out {
    since: Instant,
    /// Failed steps, counted once per object.
    waited: HashSet<ObjectKey>,
    failures: u64,
}

/// What ended an outage, for the line that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Recovered {
    /// How long requests failed.
    pub(super) lasted: Duration,
    /// Objects whose step failed meanwhile.
    pub(super) objects: usize,
    /// Failed attempts.
    pub(super) failures: u64,
}

/// Whether `error` says the server cannot be reached (rather than refusing the request).
pub(super) fn unreachable(error: &ClusterError) -> bool {
    match error.kind {
        FailureKind::ConnectionRefused
        | FailureKind::ConnectionReset
        | FailureKind::Eof
        | FailureKind::Timeout => true,
        FailureKind::Http => matches!(error.status, Some(429 | 500 | 502 | 503 | 504)),
        _ => false,
    }
}

impl Outage {
    /// A step of `key` failed with `error` at `now`. True when this starts an outage
    /// (the caller says so, once).
    pub(super) fn failed(&self, key: &ObjectKey, error: &ClusterError, now: Instant) -> bool {
        if !unreachable(error) {
            return false;
        }
        let mut state = lock(&self.state);
        let started = state.is_none();
        let out = state.get_or_insert_with(|| Out {
            since: now,
            waited: HashSet::new(),
            failures: 0,
        });
        out.failures += 1;
        out.waited.insert(key.clone());
        self.active.store(true, Ordering::Release);
        started
    }

    /// A request got through at `now`: the outage that ends, if one was on.
    pub(super) fn succeeded(&self, now: Instant) -> Option<Recovered> {
        if !self.active.load(Ordering::Acquire) {
            return None;
        }
        let out = lock(&self.state).take()?;
        self.active.store(false, Ordering::Release);
        Some(Recovered {
            lasted: now.saturating_duration_since(out.since),
            objects: out.waited.len(),
            failures: out.failures,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(kind: FailureKind, status: Option<u16>) -> ClusterError {
        ClusterError {
            kind,
            status,
            reason: None,
            message: "down".to_owned(),
            retry_after: None,
        }
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_is_said_when_it_starts_and_when_it_ends() {
        let outage = Outage::default();
        let start = Instant::now();
        assert_eq!(outage.succeeded(start), None, "nothing to end");
        let refused = error(FailureKind::ConnectionRefused, None);
        assert!(outage.failed(&key("a"), &refused, start), "starts");
        assert!(!outage.failed(&key("a"), &refused, start), "said once");
        assert!(!outage.failed(&key("b"), &error(FailureKind::Http, Some(503)), start));
        let back = start + Duration::from_secs(21);
        assert_eq!(
            outage.succeeded(back),
            Some(Recovered {
                lasted: Duration::from_secs(21),
                objects: 2,
                failures: 3,
            })
        );
        assert_eq!(outage.succeeded(back), None, "ended once");
        assert!(outage.failed(&key("a"), &refused, back), "a new one");
    }

    #[tokio::test(start_paused = true)]
    async fn refusals_of_the_request_are_no_outage() {
        let outage = Outage::default();
        let now = Instant::now();
        for e in [
            error(FailureKind::Http, Some(409)),
            error(FailureKind::Http, Some(422)),
            error(FailureKind::Http, Some(404)),
            error(FailureKind::Template, None),
        ] {
            assert!(!outage.failed(&key("a"), &e, now), "{e}");
        }
        assert_eq!(outage.succeeded(now), None);
    }
}
