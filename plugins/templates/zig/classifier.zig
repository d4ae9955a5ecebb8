//! {{name}}: a kstage classifier plugin written in Zig.
//!
//! Decides what a failed step does next: 409 Conflict refreshes, 404 and 410 drop the
//! job quietly, a step that failed `max_attempts` times is dropped with a warning, 429
//! and 5xx are retried after the server's Retry-After (else `retry_ms`), anything else
//! gets kstage's backoff.

const c = @import("bindings");

const Failure = c.kstage_plugin_types_failure_t;
const Decision = c.kstage_plugin_types_decision_t;

/// Failures of one step before the job is dropped.
const max_attempts: u32 = 5;
/// The wait before retrying a 429 or 5xx that came without Retry-After, in milliseconds.
const retry_ms: u64 = 1000;

const refresh: Decision = .{ .tag = c.KSTAGE_PLUGIN_TYPES_DECISION_REFRESH };
const backoff: Decision = .{ .tag = c.KSTAGE_PLUGIN_TYPES_DECISION_BACKOFF };

fn drop(warn: bool) Decision {
    return .{ .tag = c.KSTAGE_PLUGIN_TYPES_DECISION_DROP, .val = .{ .drop = warn } };
}

fn retryAfter(ms: u64) Decision {
    return .{ .tag = c.KSTAGE_PLUGIN_TYPES_DECISION_RETRY_AFTER, .val = .{ .retry_after = ms } };
}

fn decide(f: *const Failure) Decision {
    const http = f.kind == c.KSTAGE_PLUGIN_TYPES_FAILURE_KIND_HTTP and f.status.is_some;
    const status: u16 = if (http) f.status.val else 0;
    if (status == 409) return refresh;
    if (status == 404 or status == 410) return drop(false);
    // `attempt` counts the failures before this one.
    if (f.attempt + 1 >= max_attempts) return drop(true);
    if (status == 429 or status >= 500) {
        return retryAfter(if (f.retry_after_ms.is_some) f.retry_after_ms.val else retry_ms);
    }
    return backoff;
}

export fn exports_kstage_plugin_classifier_classify(failure: *Failure, ret: *Decision) void {
    // The object the step saw is JSON text: failure.object.ptr, failure.object.len.
    ret.* = decide(failure);
    c.kstage_plugin_types_failure_free(failure);
}

export fn exports_kstage_plugin_metadata_info(ret: *c.kstage_plugin_types_plugin_info_t) void {
    c.classifier_plugin_string_dup(&ret.name, "{{name}}");
    c.classifier_plugin_string_dup(&ret.version, "0.1.0");
    c.classifier_plugin_string_dup(&ret.interface_version, "0.1.0");
}
