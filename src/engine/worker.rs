//! The workers: each pops a job, takes its object (exclusion), and plays the Stage step by
//! step through the applier; a failed step goes to `failure`, a Stage
//! played to its end frees the object and matches its newest version (and the loop guard
//! counts the play).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::applier::Sent;
use super::cache::resource_version;
use super::exclusion::Popped;
use super::journal::{Done, What};
use super::reentry::Play;
use super::{Engine, Job, Metrics, Outcome, lock, stage_id};
use crate::action::{self, Action, Typing};
use crate::cluster::event::Involved;
use crate::cluster::{Cluster, ClusterError, EventRequest, ObjectKey};
use crate::retry::FailureKind;
use crate::stage::{Stage, Step};

impl<C: Cluster> Engine<C> {
    /// Worker number `worker`: play jobs until the queue closes.
    pub(super) async fn work(self: Arc<Self>, worker: usize) {
        while let Some((_, job)) = self.queue.pop().await {
            let popped = lock(&self.keys).busy.popped(job);
            if let Popped::Run(job) = popped {
                let waited = Instant::now().saturating_duration_since(job.due);
                self.metrics.started(worker, job.lane(), waited);
                // Every line the job logs carries its Stage, object and attempt (and,
                // from its step's span, the step), whichever thread polls it. The spans
                // are at info level: off under the default filter (warn), where they cost
                // nothing measurable; enabled they cost a few per cent of kstage sim's
                // throughput (compare `--log warn` with `--log kstage=info`). The warnings
                // and errors a job writes name those fields themselves.
                let span = tracing::info_span!(
                    "job",
                    stage = %job.stage.name,
                    object = %job.key,
                    attempt = job.attempt,
                );
                self.play(job).instrument(span).await;
                self.metrics.finished(worker);
            }
        }
    }

    async fn play(&self, mut job: Job) {
        let key = job.key.clone();
        if job.step == 0 && job.attempt == 0 {
            // A fresh job renders the newest version; it is stale if that no longer
            // matches its Stage (a newer job replaces it, or none is due).
            let latest = lock(&self.keys)
                .latest
                .get(&key)
                .filter(|seen| !seen.deleted)
                .map(|seen| seen.latest(&job.object));
            let latest = latest.map(|l| l.get().unwrap_or_else(|| job.object.clone()));
            let Some(latest) = latest else {
                Metrics::bump(&self.metrics.stale);
                self.finish(&key, Outcome::Gone);
                return;
            };
            if !job.stage.selector.matches(&latest) {
                Metrics::bump(&self.metrics.stale);
                self.finish(&key, Outcome::Dropped);
                return;
            }
            job.origin = super::job::event_origin(&latest, &job.stage.name);
            job.object = latest;
        }
        let stage = job.stage.clone();
        let mut deleted = false;
        let mut done = Vec::new();
        for index in job.step..stage.steps.len() {
            if deleted && !matches!(stage.steps[index], Step::Event(_)) {
                continue;
            }
            let span = tracing::info_span!("step", step = index);
            let started = std::time::Instant::now();
            let played = self
                .step(&key, &mut job, &stage, index, &mut deleted, &mut done)
                .instrument(span.clone())
                .await;
            self.metrics
                .step_duration
                .observe(started.elapsed().as_secs_f64());
            match played {
                Ok(()) => {}
                Err(Stop::Failed(error)) => {
                    job.step = index;
                    self.fail(job, error, done).instrument(span).await;
                    return;
                }
                Err(Stop::Stale) => {
                    // Changed or deleted by someone else meanwhile: a watch event brings
                    // the news; this job is stale.
                    Metrics::bump(&self.metrics.stale);
                    self.finish(&key, Outcome::Dropped);
                    return;
                }
            }
        }
        self.metrics.transition(&stage.resource, &stage.name);
        if self
            .played_waiters
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0
        {
            self.played_news.notify_waiters();
        }
        if let Some(journal) = &self.journal {
            let what = What::Stage {
                name: stage.name.clone(),
                actions: done,
                error: None,
            };
            journal.record(key.clone(), what);
        }
        let outcome = if deleted {
            Outcome::Gone
        } else {
            Outcome::Done {
                object: job.object.clone(),
                immediate: stage.immediate_next_stage,
                stage: stage.clone(),
                matched_back_to_back: job.matched_back_to_back,
            }
        };
        if let Some(chain) = self.finish(&key, outcome) {
            self.slowed_down(&key, &job.object, &chain).await;
        }
    }

    /// Send the actions of step `index` of `stage` for `job`'s object, keeping the
    /// version each write answers with; `deleted` once the object is gone.
    async fn step(
        &self,
        key: &ObjectKey,
        job: &mut Job,
        stage: &Stage,
        index: usize,
        deleted: &mut bool,
        done: &mut Vec<Done>,
    ) -> Result<(), Stop> {
        let renderer = &*self.deciders.renderer;
        let actions = match action::step_actions(stage, index, &job.object, Typing::Typed, renderer)
        {
            Ok(actions) => actions,
            Err(e) => {
                let error = ClusterError {
                    kind: if e.is_plugin() {
                        FailureKind::Plugin
                    } else {
                        FailureKind::Template
                    },
                    status: None,
                    reason: e
                        .is_exhausted()
                        .then(|| crate::retry::REASON_EXHAUSTED.to_owned()),
                    message: e.to_string(),
                    retry_after: None,
                };
                return Err(Stop::Failed(error));
            }
        };
        for action in actions {
            let before = resource_version(&job.object).map(str::to_owned);
            let kind = action.kind();
            let is_patch = matches!(action, Action::Patch { .. });
            let is_event = matches!(action, Action::Event { .. });
            let detail = self.journal.as_ref().map(|_| action.summary());
            // Where the cluster is in this process, let go of the object while writing
            // it, so the store (then its only holder) can move it instead of copying.
            // (Not once it is gone: only events follow then; nor for an event, which
            // names the object as the step saw it.)
            let cheap = self.cluster.cheap_noop_writes() && !*deleted && !is_event;
            let held = Arc::downgrade(&job.object);
            if cheap {
                job.object = Arc::default();
            }
            let event_name = is_event.then(|| super::job::event_name(&key.name, job.origin, index));
            let sent = self.send(key, &job.object, action, event_name).await;
            if cheap && matches!(sent, Ok(Sent::Nothing) | Err(_)) {
                match held.upgrade() {
                    Some(object) => job.object = object,
                    None => return Err(Stop::Stale),
                }
            }
            if sent.is_ok() {
                self.reached();
            }
            let changed = match sent {
                Ok(Sent::Object(object)) => {
                    let changed = resource_version(&object) != before.as_deref();
                    if !changed && is_patch {
                        Metrics::bump(&self.metrics.noops);
                    }
                    job.object = object;
                    changed
                }
                Ok(Sent::Gone) => {
                    *deleted = true;
                    true
                }
                Ok(Sent::Nothing) => false,
                Err(error) => return Err(Stop::Failed(error)),
            };
            if let Some(detail) = detail {
                done.push(Done {
                    kind,
                    detail,
                    changed,
                });
            }
        }
        Ok(())
    }

    /// A request got through: say so if it ends an outage.
    fn reached(&self) {
        if let Some(back) = self.outage.succeeded(Instant::now()) {
            tracing::warn!(
                unreachable_for = ?back.lasted,
                objects = back.objects,
                failures = back.failures,
                "the API server answers again after {:.1}s out of reach; {} objects' steps waited ({} failed attempts) and are being retried",
                back.lasted.as_secs_f64(),
                back.objects,
                back.failures,
            );
        }
    }

    /// Say once that `key` was slowed down by the loop guard for playing the Stages of
    /// `chain` back to back again and again: a warning in the log and a Warning Event on
    /// the object, both naming the Stages.
    async fn slowed_down(&self, key: &ObjectKey, object: &Value, chain: &Chain) {
        let guard = &self.loop_guard;
        let stages = self.stages();
        let mut names: Vec<String> = chain
            .stages
            .iter()
            .map(|id| {
                stages
                    .stages()
                    .iter()
                    .find(|s| stage_id(s) == *id)
                    .map_or_else(|| "(a Stage since changed)".to_owned(), |s| s.name.clone())
            })
            .collect();
        if chain.more {
            names.push("...".to_owned());
        }
        let message = match names.as_slice() {
            [one] => format!(
                "kstage: Stage {one} played more than {} times within {:?} with no delay of its own (does its output still match it?): slowed down to one play per {:?}, doubling up to {:?}",
                guard.burst, guard.window, guard.window, guard.max_delay,
            ),
            _ => format!(
                "kstage: Stages {} played back to back more than {} times within {:?} with no delay of their own (does each one's output match the next?): slowed down to one play per {:?}, doubling up to {:?}",
                names.join(" -> "),
                guard.burst,
                guard.window,
                guard.window,
                guard.max_delay,
            ),
        };
        tracing::warn!(object = %key, stages = %names.join(","), "{message}");
        let event = EventRequest {
            event_type: "Warning".to_owned(),
            reason: "StageLoop".to_owned(),
            message,
            name: None,
            involved: Involved::of(key, object),
        };
        if let Err(e) = self.cluster.event(key, &event).await {
            tracing::warn!(object = %key, error = %e, "cannot record the Warning event");
        }
    }

    /// A job ended: free the object and match its newest version if needed. The chain
    /// of Stages when the loop guard slowed the object down just now (the caller says
    /// so).
    pub(super) fn finish(&self, key: &ObjectKey, outcome: Outcome) -> Option<Chain> {
        let mut keys = lock(&self.keys);
        let Some(ended) = keys.busy.ended(key) else {
            return None; // deleted meanwhile
        };
        if matches!(outcome, Outcome::Gone)
            && let Some(seen) = keys.latest.get_mut(key)
        {
            seen.deleted = true;
        }
        let slowed = match (&outcome, keys.latest.get_mut(key)) {
            (
                Outcome::Done {
                    stage,
                    matched_back_to_back,
                    ..
                },
                Some(seen),
            ) => {
                let play = Play {
                    stage: stage_id(stage),
                    matched_back_to_back: *matched_back_to_back,
                };
                let slowed = seen.reentry.played(play, Instant::now(), &self.loop_guard);
                slowed.then(|| {
                    let (stages, more) = seen.reentry.stages();
                    Chain {
                        stages: stages.to_vec(),
                        more,
                    }
                })
            }
            _ => None,
        };
        if slowed.is_some() {
            Metrics::bump(&self.metrics.slowed);
        }
        // What to match next, newest first: a version that arrived while the Stage ran,
        // the object an `immediateNextStage` Stage wrote, or a job popped meanwhile.
        // Nothing when the object is gone (or a newer version is on its way). A packed
        // version is parsed only when it is matched and is not the one the Stage wrote
        // (usually it is: the watch's echo of this job's own write).
        let next = match (outcome, keys.latest.get(key)) {
            (Outcome::Gone, _) | (_, None) => None,
            (Outcome::Done { object, .. }, Some(seen)) if ended.dirty => seen.latest(&object).get(),
            (Outcome::Dropped, Some(seen)) if ended.dirty => seen.object.upgrade(),
            (
                Outcome::Done {
                    object,
                    immediate: true,
                    ..
                },
                Some(seen),
            ) => seen.object.is_live().then_some(object),
            _ => None,
        };
        match (next, ended.pending) {
            (Some(object), _) => self.schedule(&mut keys, key.clone(), &object),
            (None, Some(pending)) => {
                let lane = pending.lane();
                self.enqueue(key.clone(), pending, lane, Duration::ZERO);
            }
            (None, None) => {}
        }
        slowed
    }
}

/// The Stages of a chain the loop guard slowed down (their addresses, see `stage_id`),
/// and whether it had more than those.
pub(super) struct Chain {
    stages: Vec<usize>,
    more: bool,
}

/// Why a step stopped its Stage.
enum Stop {
    /// It failed: classified, then retried or dropped.
    Failed(ClusterError),
    /// The object changed or went away meanwhile (the in-memory cluster let go of it).
    Stale,
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::clock::{Clock, TokioClock};
    use crate::cluster::WatchEvent;
    use crate::cluster::faults::{FaultSpec, Faults};
    use crate::cluster::memory::MemoryCluster;
    use crate::engine::EngineConfig;
    use crate::stage::StageSet;
    use crate::template::{Renderer, StageEnv};

    const REMOVAL: &str = r#"
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: removal}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions: [{key: .metadata.deletionTimestamp, operator: Exists}]
  steps:
  - event: {type: Normal, reason: Killing, message: stopped}
  - finalizers: {empty: true}
  - delete: true
"#;

    fn pod(uid: &str, version: &str, finalizers: Value) -> Arc<Value> {
        Arc::new(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "uid": uid,
                         "resourceVersion": version, "finalizers": finalizers,
                         "deletionTimestamp": "2025-01-01T00:00:00Z"},
        }))
    }

    /// An engine whose watches and workers are not started: the test is the watch (it
    /// observes events) and the worker (it pops and ends jobs).
    fn engine() -> Arc<Engine<MemoryCluster>> {
        let start = chrono::DateTime::UNIX_EPOCH;
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::new(start));
        let cluster = Arc::new(MemoryCluster::new(
            clock.clone(),
            Faults::new(FaultSpec::none(), 1),
        ));
        let renderer = Renderer::new(Arc::new(StageEnv::new(clock.clone(), start, "test")));
        let loaded = crate::stage::load::load_str(REMOVAL, &renderer).expect("Stage");
        let config = EngineConfig {
            clock,
            ..EngineConfig::default()
        };
        Engine::new(cluster, StageSet::new(loaded.stages), config)
    }

    /// Play the queued job of `key` as a worker would, up to its end with `outcome`.
    fn run_queued(engine: &Engine<MemoryCluster>, key: &ObjectKey, outcome: Outcome) {
        let job = engine.queue.cancel(key).expect("a job is queued");
        assert!(matches!(
            lock(&engine.keys).busy.popped(job),
            Popped::Run(_)
        ));
        engine.finish(key, outcome);
    }

    #[tokio::test(start_paused = true)]
    async fn the_watch_echo_of_a_write_before_a_deletion_plays_nothing() {
        let engine = engine();
        let first = pod("uid-1", "10", json!(["f"]));
        let key = ObjectKey::of(&first).expect("key");
        engine.observe(WatchEvent::Applied(first));
        // The Stage takes the finalizer off (version 11) and deletes the pod; the watch
        // brings version 11 only after the job ended.
        run_queued(&engine, &key, Outcome::Gone);
        engine.observe(WatchEvent::Applied(pod("uid-1", "11", json!([]))));
        assert!(
            !engine.queue.contains(&key),
            "an echo of the deleted object starts no Stage"
        );
        // Its deletion arrives; a new pod of the same name is played.
        engine.observe(WatchEvent::Deleted(pod("uid-1", "12", json!([]))));
        engine.observe(WatchEvent::Applied(pod("uid-2", "13", json!([]))));
        assert!(engine.queue.contains(&key), "a new object of the same name");
    }

    #[tokio::test(start_paused = true)]
    async fn a_relist_after_a_deletion_plays_the_new_object_of_that_name() {
        let engine = engine();
        let first = pod("uid-1", "10", json!([]));
        let key = ObjectKey::of(&first).expect("key");
        engine.observe(WatchEvent::Applied(first));
        run_queued(&engine, &key, Outcome::Gone);
        // The watch broke before the deletion came; the relist holds a new pod.
        engine.observe(WatchEvent::Restarted(vec![pod("uid-2", "20", json!([]))]));
        assert!(engine.queue.contains(&key));
    }
}
