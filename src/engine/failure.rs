//! A failed step: the classifier decides, [`Backoff::next`](crate::retry::Backoff::next)
//! turns the decision into what the job does (retried after a delay, retried on a freshly
//! read object, dropped), and the job is put back in the retry lane or ended.

use std::time::Duration;

use tokio::time::Instant;

use super::journal::{Done, What};
use super::{Engine, Job, Metrics, Outcome, RETRY_LANE, lock};
use crate::cluster::event::Involved;
use crate::cluster::{Cluster, ClusterError, EventRequest};
use crate::retry::{Decision, Failure, Next};

impl<C: Cluster> Engine<C> {
    /// Classify a failed step and retry, refresh or drop the job.
    pub(super) async fn fail(&self, mut job: Job, error: ClusterError, done: Vec<Done>) {
        let failure = Failure {
            kind: error.kind,
            status: error.status,
            reason: error.reason.as_deref(),
            message: &error.message,
            retry_after: error.retry_after,
            stage: &job.stage.name,
            step: job.step,
            attempt: job.attempt,
            object: &job.object,
            binding: job
                .stage
                .annotations
                .get(crate::plugin::Capability::Classifier.annotation())
                .map(String::as_str),
        };
        let decision = self.deciders.classifier.classify(&failure);
        self.metrics.retry(decision.as_str());
        let next = self
            .backoff
            .next(decision, job.attempt, &mut lock(&self.rng));
        // What the job does, named as the decision that says so.
        let (class, cause) = match next {
            Next::Drop { warn, exhausted } => (
                Decision::Drop { warn }.as_str(),
                if exhausted {
                    "max-attempts".to_owned()
                } else {
                    drop_cause(&error)
                },
            ),
            _ => (decision.as_str(), drop_cause(&error)),
        };
        tracing::debug!(object = %job.key, stage = %job.stage.name, step = job.step, retry = job.attempt, class, %error, "step failed");
        if self.outage.failed(&job.key, &error, Instant::now()) {
            tracing::warn!(%error, "the API server cannot be reached: failed steps wait and are retried with backoff (each one is a debug line); a line says when it answers again");
        }
        if let Some(journal) = &self.journal {
            let what = What::Stage {
                name: job.stage.name.clone(),
                actions: done,
                error: Some(format!("step {} failed ({class}): {error}", job.step)),
            };
            journal.record(job.key.clone(), what);
        }
        match next {
            Next::Drop { warn, .. } => {
                self.metrics.drop_job(&cause);
                if warn {
                    tracing::error!(object = %job.key, stage = %job.stage.name, step = job.step, retry = job.attempt, %error, "dropping the job");
                    let event = EventRequest {
                        event_type: "Warning".to_owned(),
                        reason: "StageFailed".to_owned(),
                        message: format!(
                            "kstage: Stage {} step {} failed: {error}",
                            job.stage.name, job.step
                        ),
                        name: None,
                        involved: Involved::of(&job.key, &job.object),
                    };
                    if let Err(e) = self.cluster.event(&job.key, &event).await {
                        tracing::warn!(object = %job.key, error = %e, "cannot record the Warning event");
                    }
                }
                self.finish(&job.key.clone(), Outcome::Dropped);
            }
            Next::Refresh => match self.cluster.get(&job.key).await {
                Ok(object) => {
                    job.object = object;
                    self.requeue(job, Duration::ZERO);
                }
                Err(e) if e.is_not_found() => {
                    self.metrics.drop_job("not-found");
                    self.finish(&job.key.clone(), Outcome::Gone);
                }
                Err(_) => {
                    let delay = self.backoff.delay(job.attempt, &mut lock(&self.rng));
                    self.requeue(job, delay);
                }
            },
            Next::Retry(delay) => self.requeue(job, delay),
        }
    }

    /// Put a failed job back at the same step, in the retry lane.
    fn requeue(&self, mut job: Job, delay: Duration) {
        job.attempt += 1;
        job.due = Instant::now() + delay;
        let key = job.key.clone();
        let Some(pending) = lock(&self.keys).busy.retrying(&key) else {
            return; // the object was deleted meanwhile
        };
        if pending.is_some() {
            Metrics::bump(&self.metrics.stale);
        }
        Metrics::bump(&self.metrics.requeued);
        self.enqueue(key, job, RETRY_LANE, delay);
    }
}

/// Why a job is dropped, as the dropped-jobs counter names it.
fn drop_cause(error: &ClusterError) -> String {
    match error.status {
        Some(404) => "not-found".to_owned(),
        _ => error
            .reason
            .clone()
            .unwrap_or_else(|| error.kind.as_str().to_owned()),
    }
}
