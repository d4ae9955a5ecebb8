//! Per-object exclusion: one object never has two jobs running at once, and a version that
//! arrives while its object is busy waits for the job to end instead of starting another.
//!
//! A synchronous state machine: every call says what the caller does next, nothing here
//! waits or reads a clock (the engine holds its keys lock around each call). An object is
//! *busy* from the moment a worker starts its job until the job ends, through any retry
//! it waits for in the queue.

use std::collections::HashMap;

use super::job::Job;
use crate::cluster::ObjectKey;

/// The busy objects.
#[derive(Debug, Default)]
pub(super) struct Exclusion {
    busy: HashMap<ObjectKey, Busy, foldhash::fast::RandomState>,
}

#[derive(Debug, Default)]
struct Busy {
    /// A worker is playing a Stage on the object (else a retry is waiting in the queue).
    running: bool,
    /// A newer version arrived meanwhile.
    dirty: bool,
    /// A job popped while another ran for the same object.
    pending: Option<Job>,
}

/// What a worker does with a job it popped.
#[derive(Debug)]
pub(super) enum Popped {
    /// Play it: the object is now busy with it.
    Run(Job),
    /// Nothing now: another job of the object is running; this one is kept until that
    /// one ends.
    Parked,
}

/// How a job's end leaves its object.
#[derive(Debug)]
pub(super) struct Ended {
    /// A newer version arrived while the job ran: match the object again.
    pub(super) dirty: bool,
    /// A job popped for the object while this one ran.
    pub(super) pending: Option<Job>,
}

impl Exclusion {
    /// A worker popped `job`.
    pub(super) fn popped(&mut self, job: Job) -> Popped {
        let busy = self.busy.entry(job.key.clone()).or_default();
        if busy.running {
            busy.pending = Some(job);
            return Popped::Parked;
        }
        busy.running = true;
        Popped::Run(job)
    }

    /// A new version of the object arrived: true when the object is busy (the version
    /// is matched once its job ends), false when it is to be matched now.
    pub(super) fn arrived(&mut self, key: &ObjectKey) -> bool {
        match self.busy.get_mut(key) {
            Some(busy) => {
                busy.dirty = true;
                true
            }
            None => false,
        }
    }

    /// The running job of `key` failed and is to wait for a retry: `None` when the object
    /// went away meanwhile (the job is dropped); else the job popped meanwhile, which the
    /// retry supersedes. The object stays busy until the retry ends.
    pub(super) fn retrying(&mut self, key: &ObjectKey) -> Option<Option<Job>> {
        let busy = self.busy.get_mut(key)?;
        busy.running = false;
        Some(busy.pending.take())
    }

    /// The job of `key` ended: `None` when the object went away meanwhile; else what
    /// arrived while it ran. The object is no longer busy.
    pub(super) fn ended(&mut self, key: &ObjectKey) -> Option<Ended> {
        let busy = self.busy.remove(key)?;
        Some(Ended {
            dirty: busy.dirty,
            pending: busy.pending,
        })
    }

    /// The object went away: whatever it was busy with ends with nothing to follow.
    pub(super) fn forget(&mut self, key: &ObjectKey) {
        self.busy.remove(key);
    }

    /// Whether no object is busy.
    pub(super) fn is_empty(&self) -> bool {
        self.busy.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::Value;

    use super::*;
    use crate::stage::StageSet;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    fn job(name: &str, step: usize) -> Job {
        let renderer = crate::template::Renderer::new(Arc::new(crate::template::GoldenEnv));
        let stage = "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: s}\nspec:\n  resourceRef: {apiGroup: v1, kind: Pod}\n  selector: {matchLabels: {a: b}}\n";
        let loaded = crate::stage::load::load_str(stage, &renderer).expect("loads");
        let set = StageSet::new(loaded.stages);
        Job {
            key: key(name),
            object: Arc::new(Value::Null),
            stage: set.stages()[0].clone(),
            step,
            attempt: 0,
            due: tokio::time::Instant::now(),
            origin: 0,
            matched_back_to_back: None,
        }
    }

    #[test]
    fn a_second_job_of_a_running_object_is_parked_until_the_first_ends() {
        let mut x = Exclusion::default();
        assert!(matches!(x.popped(job("a", 0)), Popped::Run(_)));
        // Another object runs beside it.
        assert!(matches!(x.popped(job("b", 0)), Popped::Run(_)));
        assert!(matches!(x.popped(job("a", 1)), Popped::Parked));
        let ended = x.ended(&key("a")).expect("busy");
        assert_eq!(
            ended.pending.map(|j| j.step),
            Some(1),
            "the parked job follows"
        );
        assert!(!ended.dirty);
        assert!(x.ended(&key("a")).is_none(), "no longer busy");
    }

    #[test]
    fn a_version_arriving_while_busy_waits_for_the_end_of_the_job() {
        let mut x = Exclusion::default();
        assert!(!x.arrived(&key("a")), "idle: matched at once");
        assert!(matches!(x.popped(job("a", 0)), Popped::Run(_)));
        assert!(x.arrived(&key("a")), "busy: it waits");
        assert!(x.ended(&key("a")).expect("busy").dirty);
        assert!(!x.arrived(&key("a")), "idle again");
    }

    #[test]
    fn a_retry_keeps_the_object_busy_and_supersedes_a_parked_job() {
        let mut x = Exclusion::default();
        assert!(matches!(x.popped(job("a", 0)), Popped::Run(_)));
        assert!(matches!(x.popped(job("a", 0)), Popped::Parked));
        let parked = x.retrying(&key("a")).expect("busy");
        assert!(
            parked.is_some(),
            "the parked job is handed back, superseded"
        );
        // Waiting for its retry, the object is still busy: new versions wait too.
        assert!(x.arrived(&key("a")));
        assert!(!x.is_empty());
        // The retry is popped and runs (nothing else runs for the object).
        assert!(matches!(x.popped(job("a", 0)), Popped::Run(_)));
        assert!(x.ended(&key("a")).expect("busy").dirty);
        assert!(x.is_empty());
    }

    #[test]
    fn an_object_gone_meanwhile_ends_its_job_with_nothing_to_follow() {
        let mut x = Exclusion::default();
        assert!(matches!(x.popped(job("a", 0)), Popped::Run(_)));
        x.forget(&key("a"));
        assert!(
            x.retrying(&key("a")).is_none(),
            "no retry for a gone object"
        );
        assert!(x.ended(&key("a")).is_none());
        assert!(x.is_empty());
    }
}
