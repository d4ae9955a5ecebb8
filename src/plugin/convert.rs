//! Between kstage's own types and the WIT types a plugin sees.

use std::time::Duration;

use super::bindings::types;
use crate::retry::{Decision, Failure, FailureKind};

/// An object as the JSON text a plugin receives: written into a buffer sized for a
/// typical object at once. `Value`'s `Display` goes through `fmt::Write` and grows its
/// buffer from 128 bytes: several times slower for a pod (`cargo bench --bench plugin`,
/// "marshal via Display" against "marshal only").
pub fn object_json(object: &serde_json::Value) -> String {
    let mut buf = Vec::with_capacity(2048);
    // Writing a `Value` into a Vec cannot fail, and serde_json writes UTF-8.
    let _ = serde_json::to_writer(&mut buf, object);
    String::from_utf8(buf).unwrap_or_default()
}

/// A failure as the `classifier` interface carries it.
pub fn failure(failure: &Failure<'_>) -> types::Failure {
    types::Failure {
        kind: failure_kind(failure.kind),
        status: failure.status,
        reason: failure.reason.map(str::to_owned),
        message: failure.message.to_owned(),
        retry_after_ms: failure.retry_after.map(|d| d.as_millis() as u64),
        stage: failure.stage.to_owned(),
        step: u32::try_from(failure.step).unwrap_or(u32::MAX),
        attempt: failure.attempt,
        object: object_json(failure.object),
    }
}

/// kstage's failure kind as the WIT enum.
pub fn failure_kind(kind: FailureKind) -> types::FailureKind {
    match kind {
        FailureKind::ConnectionRefused => types::FailureKind::ConnectionRefused,
        FailureKind::ConnectionReset => types::FailureKind::ConnectionReset,
        FailureKind::Eof => types::FailureKind::Eof,
        FailureKind::Timeout => types::FailureKind::Timeout,
        FailureKind::Http => types::FailureKind::Http,
        FailureKind::Template => types::FailureKind::Template,
        FailureKind::Expression => types::FailureKind::Expression,
        FailureKind::Plugin => types::FailureKind::Plugin,
        FailureKind::Other => types::FailureKind::Other,
    }
}

/// A failure kind by its stable name (`http`, `connection-reset` ...).
pub fn parse_failure_kind(name: &str) -> Option<FailureKind> {
    [
        FailureKind::ConnectionRefused,
        FailureKind::ConnectionReset,
        FailureKind::Eof,
        FailureKind::Timeout,
        FailureKind::Http,
        FailureKind::Template,
        FailureKind::Expression,
        FailureKind::Plugin,
        FailureKind::Other,
    ]
    .into_iter()
    .find(|k| k.as_str() == name)
}

/// A plugin's decision as kstage's.
pub fn decision(decision: &types::Decision) -> Decision {
    match *decision {
        types::Decision::RetryAfter(ms) => Decision::RetryAfter(Duration::from_millis(ms)),
        types::Decision::Backoff => Decision::Backoff,
        types::Decision::Refresh => Decision::Refresh,
        types::Decision::Drop(warn) => Decision::Drop { warn },
    }
}
