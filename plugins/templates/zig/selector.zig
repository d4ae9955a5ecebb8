//! {{name}}: a kstage selector plugin written in Zig.
//!
//! Plays the heaviest candidate Stage (the first of equal weights) instead of kstage's
//! weighted random choice, and lets no Stage wait longer than `max_delay_ms`.
//!
//! Memory: the arguments are the plugin's to free; the answer's strings are freed by
//! the bindings after kstage has read them, so they are heap copies.

const c = @import("bindings");

const Candidate = c.kstage_plugin_types_candidate_t;

/// The longest a chosen Stage may wait, in milliseconds.
const max_delay_ms: i64 = 1000;

export fn exports_kstage_plugin_selector_select(
    object: *c.exports_kstage_plugin_selector_json_t,
    candidates: *c.exports_kstage_plugin_selector_list_candidate_t,
    ret: *c.exports_kstage_plugin_selector_option_selection_t,
    err: *c.selector_plugin_string_t,
) bool {
    _ = err; // this plugin never fails: `return false` with err set would.
    // The object is JSON text (object.ptr, object.len); this plugin does not read it.
    const list: []const Candidate = if (candidates.len == 0) &.{} else candidates.ptr[0..candidates.len];
    var heaviest: ?*const Candidate = null;
    for (list) |*candidate| {
        if (heaviest == null or candidate.weight > heaviest.?.weight) heaviest = candidate;
    }
    ret.is_some = false;
    if (heaviest) |h| {
        ret.is_some = true;
        c.selector_plugin_string_dup_n(&ret.val.stage, h.name.ptr, h.name.len);
        // Not set: kstage keeps the delay it drew.
        ret.val.delay_ms = .{
            .is_some = h.delay_ms.is_some and h.delay_ms.val > max_delay_ms,
            .val = max_delay_ms,
        };
    }
    c.exports_kstage_plugin_selector_json_free(object);
    c.exports_kstage_plugin_selector_list_candidate_free(candidates);
    return true;
}

export fn exports_kstage_plugin_metadata_info(ret: *c.exports_kstage_plugin_metadata_plugin_info_t) void {
    c.selector_plugin_string_dup(&ret.name, "{{name}}");
    c.selector_plugin_string_dup(&ret.version, "0.1.0");
    c.selector_plugin_string_dup(&ret.interface_version, "0.1.0");
}
