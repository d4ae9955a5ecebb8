//! {{name}}: a kstage renderer plugin written in Zig.
//!
//! A Stage's template is JSON in which `${stage}` becomes the name of the Stage being
//! played and `${now}` kstage's current time; the rest is sent as written (kstage checks
//! that the result is JSON).
//!
//! Memory: the arguments are the plugin's to free; the answer is freed (with libc's
//! `free`) by the bindings after kstage has read it, so it comes from `malloc`.

const std = @import("std");
const c = @import("bindings");

const Str = c.renderer_plugin_string_t;

const stage_token = "${stage}";
const now_token = "${now}";

fn bytes(s: *const Str) []const u8 {
    return if (s.len == 0) &.{} else s.ptr[0..s.len];
}

/// The length of the filled template; also writes it into `out` when given.
fn fill(template: []const u8, stage: []const u8, now: []const u8, out: ?[*]u8) usize {
    var n: usize = 0;
    var i: usize = 0;
    while (i < template.len) {
        var piece = template[i .. i + 1];
        var skip: usize = 1;
        if (std.mem.startsWith(u8, template[i..], stage_token)) {
            piece = stage;
            skip = stage_token.len;
        } else if (std.mem.startsWith(u8, template[i..], now_token)) {
            piece = now;
            skip = now_token.len;
        }
        if (out) |o| @memcpy(o[n .. n + piece.len], piece);
        n += piece.len;
        i += skip;
    }
    return n;
}

export fn exports_kstage_plugin_renderer_render(
    stage: *Str,
    template: *Str,
    object: *c.exports_kstage_plugin_renderer_json_t,
    ret: *c.exports_kstage_plugin_renderer_json_t,
    err: *Str,
) bool {
    var now: Str = .{ .ptr = null, .len = 0 };
    defer {
        c.renderer_plugin_string_free(&now);
        c.renderer_plugin_string_free(stage);
        c.renderer_plugin_string_free(template);
        c.exports_kstage_plugin_renderer_json_free(object);
    }
    if (std.mem.indexOf(u8, bytes(template), now_token) != null) c.kstage_plugin_host_now(&now);
    const len = fill(bytes(template), bytes(stage), bytes(&now), null);
    const buf: [*]u8 = @ptrCast(std.c.malloc(@max(len, 1)) orelse {
        // `false` with err set is the `err` answer.
        c.renderer_plugin_string_dup(err, "out of memory");
        return false;
    });
    _ = fill(bytes(template), bytes(stage), bytes(&now), buf);
    ret.* = .{ .ptr = buf, .len = len };
    return true;
}

export fn exports_kstage_plugin_metadata_info(ret: *c.exports_kstage_plugin_metadata_plugin_info_t) void {
    c.renderer_plugin_string_dup(&ret.name, "{{name}}");
    c.renderer_plugin_string_dup(&ret.version, "0.1.0");
    c.renderer_plugin_string_dup(&ret.interface_version, "0.1.0");
}
