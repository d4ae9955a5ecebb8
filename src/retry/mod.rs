//! Retry: what to do when a step fails ([`Classifier`] → [`Decision`]) and how long to
//! wait before trying again ([`Backoff`]).
//!
//! The built-in classifier follows the table in the README (transient network errors and
//! 429/5xx retry, 409 refreshes the object, 404 drops, other client errors drop with a
//! Warning event). It is a trait so a plugin can replace it.

use std::time::Duration;

use serde_json::Value;

use crate::rng::Rng;

/// How a step failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The connection was refused.
    ConnectionRefused,
    /// The connection was reset.
    ConnectionReset,
    /// The connection closed before a response.
    Eof,
    /// No response in time (client side or a server timeout).
    Timeout,
    /// The server answered with an error status.
    Http,
    /// A template failed to render or rendered something unusable.
    Template,
    /// A jq or CEL expression failed.
    Expression,
    /// A plugin failed (trap, timeout, memory limit, malformed output) and its failure
    /// policy is `fail`.
    Plugin,
    /// Anything else.
    Other,
}

impl FailureKind {
    /// A stable lower-case name, for logs, metrics and plugins.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::ConnectionRefused => "connection-refused",
            FailureKind::ConnectionReset => "connection-reset",
            FailureKind::Eof => "eof",
            FailureKind::Timeout => "timeout",
            FailureKind::Http => "http",
            FailureKind::Template => "template",
            FailureKind::Expression => "expression",
            FailureKind::Plugin => "plugin",
            FailureKind::Other => "other",
        }
    }
}

/// Everything a classifier may look at.
#[derive(Debug, Clone, Copy)]
pub struct Failure<'a> {
    /// How it failed.
    pub kind: FailureKind,
    /// The HTTP status, for [`FailureKind::Http`].
    pub status: Option<u16>,
    /// The Kubernetes `Status` reason (`Conflict`, `NotFound` ...), when the server gave one.
    pub reason: Option<&'a str>,
    /// A human-readable message.
    pub message: &'a str,
    /// The server's `Retry-After`, if any.
    pub retry_after: Option<Duration>,
    /// The Stage being played.
    pub stage: &'a str,
    /// The index of the failed step.
    pub step: usize,
    /// How many times this step already failed before this failure (0 on the first).
    pub attempt: u32,
    /// The object, as the job saw it.
    pub object: &'a Value,
    /// The classifier plugin the Stage names with `kstage.dev/classifier`, if any.
    pub binding: Option<&'a str>,
}

/// The [`Failure::reason`] of a template that failed because an address range is full.
pub const REASON_EXHAUSTED: &str = "AddressRangeExhausted";

/// What to do with a failed step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Retry the same step after exactly this delay.
    RetryAfter(Duration),
    /// Retry the same step after the default backoff for its attempt.
    Backoff,
    /// Read the object again, then retry the same step at once (conflicts).
    Refresh,
    /// Give up on the job.
    Drop {
        /// Also emit a Warning event on the object and log an error.
        warn: bool,
    },
}

impl Decision {
    /// A stable lower-case name, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::RetryAfter(_) => "retry-after",
            Decision::Backoff => "backoff",
            Decision::Refresh => "refresh",
            Decision::Drop { warn: false } => "drop",
            Decision::Drop { warn: true } => "drop-warn",
        }
    }
}

/// Turns a failure into a decision. Implementations must be cheap and must not block.
pub trait Classifier: Send + Sync {
    /// Decide what to do with `failure`.
    fn classify(&self, failure: &Failure<'_>) -> Decision;
}

/// kstage's built-in classification (the README's table).
#[derive(Debug, Clone, Copy, Default)]
pub struct BuiltinClassifier;

impl Classifier for BuiltinClassifier {
    fn classify(&self, failure: &Failure<'_>) -> Decision {
        let retry = || match failure.retry_after {
            Some(after) => Decision::RetryAfter(after),
            None => Decision::Backoff,
        };
        match failure.kind {
            FailureKind::ConnectionRefused
            | FailureKind::ConnectionReset
            | FailureKind::Eof
            | FailureKind::Timeout => retry(),
            // A full address range frees up as pods go: wait for it.
            FailureKind::Template if failure.reason == Some(REASON_EXHAUSTED) => Decision::Backoff,
            FailureKind::Template | FailureKind::Expression => Decision::Drop { warn: true },
            // A plugin that trapped or timed out may be fixed by a hot swap: keep trying.
            FailureKind::Other | FailureKind::Plugin => Decision::Backoff,
            FailureKind::Http => match failure.status {
                Some(409) => Decision::Refresh,
                Some(404 | 410) => Decision::Drop { warn: false },
                Some(408 | 429) => retry(),
                Some(s) if s >= 500 => retry(),
                Some(_) | None => Decision::Drop { warn: true },
            },
        }
    }
}

/// Exponential backoff with jitter. The default is KWOK's: 1 s, doubling, capped at
/// 32 minutes, up to 20% jitter added, no limit on attempts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay before the first retry (attempt 0).
    pub base: Duration,
    /// Growth per attempt.
    pub factor: f64,
    /// Largest delay before jitter.
    pub cap: Duration,
    /// Up to this fraction of the delay is added at random.
    pub jitter: f64,
    /// Give up after this many failed attempts of a step; `None` retries forever.
    pub max_attempts: Option<u32>,
}

impl Default for Backoff {
    /// KWOK's `backoffDelayByStep`: 1 s × 2ⁿ, capped at 32 min, jitter 0.2.
    fn default() -> Self {
        Self {
            base: Duration::from_secs(1),
            factor: 2.0,
            cap: Duration::from_secs(32 * 60),
            jitter: 0.2,
            max_attempts: None,
        }
    }
}

impl Backoff {
    /// The delay before retrying a step that failed `attempt` times before (0 = first
    /// failure): `min(base × factorᵃᵗᵗᵉᵐᵖᵗ, cap)`, plus up to `jitter` of it.
    pub fn delay(&self, attempt: u32, rng: &mut Rng) -> Duration {
        let exp = self.factor.max(1.0).powi(attempt.min(1024) as i32);
        let raw = self.base.as_secs_f64() * exp;
        let capped = raw.min(self.cap.as_secs_f64());
        let jittered = capped * (1.0 + self.jitter.max(0.0) * rng.unit());
        Duration::from_secs_f64(jittered.min(u64::MAX as f64 / 2.0))
    }

    /// Whether a step that has now failed `failures` times may be tried again.
    pub fn allows(&self, failures: u32) -> bool {
        self.max_attempts.is_none_or(|max| failures < max)
    }

    /// The delay a decision asks for: `None` means drop the job.
    pub fn delay_for(&self, decision: Decision, attempt: u32, rng: &mut Rng) -> Option<Duration> {
        match decision {
            Decision::RetryAfter(d) => Some(d),
            Decision::Backoff => Some(self.delay(attempt, rng)),
            Decision::Refresh => Some(Duration::ZERO),
            Decision::Drop { .. } => None,
        }
    }

    /// What happens to a job whose step failed for the `attempt`-th time (from 0), the
    /// classifier having decided `decision`: retried after a delay, retried at once on a
    /// freshly read object, or dropped, also when it has no attempt left. The one place
    /// the engine turns a decision into what it does.
    pub fn next(&self, decision: Decision, attempt: u32, rng: &mut Rng) -> Next {
        let exhausted = !matches!(decision, Decision::Drop { .. }) && !self.allows(attempt + 1);
        if exhausted {
            return Next::Drop {
                warn: true,
                exhausted: true,
            };
        }
        match self.delay_for(decision, attempt, rng) {
            None => Next::Drop {
                warn: matches!(decision, Decision::Drop { warn: true }),
                exhausted: false,
            },
            Some(_) if matches!(decision, Decision::Refresh) => Next::Refresh,
            Some(delay) => Next::Retry(delay),
        }
    }
}

/// What a failed job does next (see [`Backoff::next`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Retried at the same step after this delay.
    Retry(Duration),
    /// Retried at once at the same step, after reading the object again.
    Refresh,
    /// Dropped.
    Drop {
        /// With a Warning event on the object and an error log.
        warn: bool,
        /// Because the step had no attempt left (not by the classifier's decision).
        exhausted: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(kind: FailureKind, status: Option<u16>) -> Failure<'static> {
        static OBJECT: Value = Value::Null;
        Failure {
            kind,
            status,
            reason: None,
            message: "m",
            retry_after: None,
            stage: "s",
            step: 0,
            attempt: 0,
            object: &OBJECT,
            binding: None,
        }
    }

    #[test]
    fn builtin_table() {
        let c = BuiltinClassifier;
        for kind in [
            FailureKind::ConnectionRefused,
            FailureKind::ConnectionReset,
            FailureKind::Eof,
            FailureKind::Timeout,
        ] {
            assert_eq!(
                c.classify(&failure(kind, None)),
                Decision::Backoff,
                "{kind:?}"
            );
        }
        for status in [429, 500, 502, 503, 504] {
            assert_eq!(
                c.classify(&failure(FailureKind::Http, Some(status))),
                Decision::Backoff,
                "{status}"
            );
        }
        assert_eq!(
            c.classify(&failure(FailureKind::Http, Some(409))),
            Decision::Refresh
        );
        assert_eq!(
            c.classify(&failure(FailureKind::Http, Some(404))),
            Decision::Drop { warn: false }
        );
        for status in [400, 403, 422] {
            assert_eq!(
                c.classify(&failure(FailureKind::Http, Some(status))),
                Decision::Drop { warn: true },
                "{status}"
            );
        }
        assert_eq!(
            c.classify(&failure(FailureKind::Template, None)),
            Decision::Drop { warn: true }
        );
        let full = Failure {
            reason: Some(REASON_EXHAUSTED),
            ..failure(FailureKind::Template, None)
        };
        assert_eq!(
            c.classify(&full),
            Decision::Backoff,
            "a full range frees up"
        );
        assert_eq!(
            c.classify(&failure(FailureKind::Expression, None)),
            Decision::Drop { warn: true }
        );
    }

    #[test]
    fn retry_after_is_honoured() {
        let mut f = failure(FailureKind::Http, Some(429));
        f.retry_after = Some(Duration::from_secs(7));
        assert_eq!(
            BuiltinClassifier.classify(&f),
            Decision::RetryAfter(Duration::from_secs(7))
        );
    }

    #[test]
    fn kwok_backoff_schedule() {
        let b = Backoff::default();
        let mut rng = Rng::seeded(3);
        for attempt in 0..16 {
            let d = b.delay(attempt, &mut rng).as_secs_f64();
            let expect = (2f64.powi(attempt as i32)).min(32.0 * 60.0);
            assert!(
                d >= expect && d <= expect * 1.2 + 1e-9,
                "attempt {attempt}: {d} vs {expect}"
            );
        }
        let no_jitter = Backoff { jitter: 0.0, ..b };
        assert_eq!(no_jitter.delay(0, &mut rng), Duration::from_secs(1));
        assert_eq!(no_jitter.delay(3, &mut rng), Duration::from_secs(8));
        assert_eq!(no_jitter.delay(40, &mut rng), Duration::from_secs(32 * 60));
    }

    #[test]
    fn max_attempts() {
        let b = Backoff {
            max_attempts: Some(3),
            ..Backoff::default()
        };
        assert!(b.allows(2));
        assert!(!b.allows(3));
        assert!(Backoff::default().allows(u32::MAX - 1));
        let mut rng = Rng::seeded(1);
        assert_eq!(
            b.delay_for(Decision::Drop { warn: true }, 0, &mut rng),
            None
        );
        assert_eq!(
            b.delay_for(Decision::Refresh, 5, &mut rng),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn next_turns_each_decision_into_what_the_job_does() {
        let b = Backoff {
            jitter: 0.0,
            max_attempts: Some(3),
            ..Backoff::default()
        };
        let mut rng = Rng::seeded(1);
        let mut next = |d, attempt| b.next(d, attempt, &mut rng);
        let ms = Duration::from_millis;
        assert_eq!(
            next(Decision::RetryAfter(ms(1234)), 0),
            Next::Retry(ms(1234))
        );
        assert_eq!(next(Decision::Backoff, 1), Next::Retry(ms(2000)));
        assert_eq!(next(Decision::Refresh, 1), Next::Refresh);
        for warn in [true, false] {
            assert_eq!(
                next(Decision::Drop { warn }, 0),
                Next::Drop {
                    warn,
                    exhausted: false
                }
            );
        }
        // The third failure leaves no attempt: every retry becomes a warned drop.
        for decision in [
            Decision::Backoff,
            Decision::Refresh,
            Decision::RetryAfter(ms(1)),
        ] {
            assert_eq!(
                next(decision, 2),
                Next::Drop {
                    warn: true,
                    exhausted: true
                }
            );
        }
    }
}
