//! {{name}}: a kstage classifier plugin.
//!
//! Decides what a failed step does next: 409 Conflict refreshes, 404 and 410 drop the
//! job quietly, a step that failed `MAX_ATTEMPTS` times is dropped with a warning, 429
//! and 5xx are retried after the server's Retry-After (else `RETRY_MS`), anything else
//! gets kstage's backoff.

use kstage_plugin as kp;

/// Failures of one step before the job is dropped.
const MAX_ATTEMPTS: u32 = 5;
/// The wait before retrying a 429 or 5xx that came without Retry-After, in milliseconds.
const RETRY_MS: u64 = 1000;

struct {{NameCamel}};

impl kp::Plugin for {{NameCamel}} {
    fn info() -> kp::Info {
        kp::Info::new("{{name}}", "0.1.0")
    }
}

impl kp::Classifier for {{NameCamel}} {
    fn classify(failure: &kp::Failure) -> kp::Decision {
        // The object the step saw: `kp::Object::new(&failure.object)`.
        let status = match failure.kind {
            kp::FailureKind::Http => failure.status,
            _ => None,
        };
        match status {
            Some(409) => kp::Decision::Refresh,
            Some(404 | 410) => kp::Decision::Drop(false),
            // `attempt` counts the failures before this one.
            _ if failure.attempt + 1 >= MAX_ATTEMPTS => kp::Decision::Drop(true),
            Some(s) if s == 429 || s >= 500 => {
                kp::Decision::RetryAfter(failure.retry_after_ms.unwrap_or(RETRY_MS))
            }
            _ => kp::Decision::Backoff,
        }
    }
}

kp::export!({{NameCamel}}: classifier);
