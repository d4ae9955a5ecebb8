//! exp-backoff: a kstage retry classifier written in Zig.
//!
//! Transient failures (connection refused or reset, EOF, timeout, HTTP 429 and 5xx)
//! retry after 100 ms * 2^attempt, capped at 30 s; a larger Retry-After from the
//! server wins. Conflicts refresh, other client errors drop, the rest backs off.
//!
//! The C bindings from `wit-bindgen c` do the canonical-ABI lifting and lowering;
//! build.sh turns their header into the `bindings` module with `zig translate-c`
//! and compiles their `.c` file beside this one.
//!
//! Memory: kstage passes the failure's strings (reason, message, stage, object) in
//! memory it allocated through the bindings' `cabi_realloc` (wasi-libc's `realloc`),
//! and the bindings hand their ownership to `classify` without a post-return for it,
//! so `classify` frees them before returning. `info` returns heap copies, because
//! the generated post-return for `info` frees its three strings.

const c = @import("bindings");

const Failure = c.kstage_plugin_types_failure_t;
const Decision = c.kstage_plugin_types_decision_t;

/// The first retry waits this long (milliseconds); each further attempt doubles it.
const base_ms: u64 = 100;
/// No computed delay is longer than this (a server's Retry-After may be).
const cap_ms: u64 = 30_000;

/// min(base_ms * 2^attempt, cap_ms), without overflow for any attempt.
fn exponential(attempt: u32) u64 {
    if (attempt >= 32) return cap_ms;
    const ms = base_ms << @intCast(attempt); // base_ms * 2^31 still fits in a u64
    return @min(ms, cap_ms);
}

fn retryAfter(f: *const Failure) Decision {
    var ms = exponential(f.attempt);
    if (f.retry_after_ms.is_some and f.retry_after_ms.val > ms) ms = f.retry_after_ms.val;
    return .{ .tag = c.KSTAGE_PLUGIN_TYPES_DECISION_RETRY_AFTER, .val = .{ .retry_after = ms } };
}

const backoff: Decision = .{ .tag = c.KSTAGE_PLUGIN_TYPES_DECISION_BACKOFF };
const refresh: Decision = .{ .tag = c.KSTAGE_PLUGIN_TYPES_DECISION_REFRESH };
const drop_warn: Decision = .{ .tag = c.KSTAGE_PLUGIN_TYPES_DECISION_DROP, .val = .{ .drop = true } };

fn decide(f: *const Failure) Decision {
    return switch (f.kind) {
        c.KSTAGE_PLUGIN_TYPES_FAILURE_KIND_CONNECTION_REFUSED,
        c.KSTAGE_PLUGIN_TYPES_FAILURE_KIND_CONNECTION_RESET,
        c.KSTAGE_PLUGIN_TYPES_FAILURE_KIND_EOF,
        c.KSTAGE_PLUGIN_TYPES_FAILURE_KIND_TIMEOUT,
        => retryAfter(f),
        c.KSTAGE_PLUGIN_TYPES_FAILURE_KIND_HTTP => {
            // An http failure without a status counts as an unknown status: back off.
            const status: u16 = if (f.status.is_some) f.status.val else 0;
            if (status == 429 or (status >= 500 and status <= 599)) return retryAfter(f);
            if (status == 409) return refresh;
            if (status >= 400 and status <= 499) return drop_warn;
            return backoff;
        },
        c.KSTAGE_PLUGIN_TYPES_FAILURE_KIND_TEMPLATE,
        c.KSTAGE_PLUGIN_TYPES_FAILURE_KIND_EXPRESSION,
        => drop_warn,
        else => backoff, // plugin, other
    };
}

export fn exports_kstage_plugin_classifier_classify(failure: *Failure, ret: *Decision) void {
    ret.* = decide(failure);
    c.exports_kstage_plugin_classifier_failure_free(failure);
}

export fn exports_kstage_plugin_metadata_info(ret: *c.kstage_plugin_types_plugin_info_t) void {
    c.classifier_plugin_string_dup(&ret.name, "exp-backoff");
    c.classifier_plugin_string_dup(&ret.version, "0.1.0");
    c.classifier_plugin_string_dup(&ret.interface_version, "0.1.0");
}
