//! A trap told so a plugin's author can act on it: what trapped (wasmtime's reason), the
//! last lines the guest wrote to stderr (where Python prints its traceback, Rust and Go
//! their panic message), and the top frames of the wasm backtrace, one line each.
//!
//! ```text
//! wasm trap: wasm `unreachable` instruction executed
//!   stderr:
//!     thread '<unnamed>' panicked at src/lib.rs:12:5:
//!     no candidate
//!   wasm backtrace:
//!      0: chaos_router.wasm!__rust_start_panic
//!      1: chaos_router.wasm!chaos_router::select at src/lib.rs:12
//! ```

use wasmtime::{FrameInfo, WasmBacktrace};

/// The most lines of the guest's stderr shown.
pub const STDERR_LINES: usize = 12;
/// The most wasm frames shown (the innermost ones).
pub const FRAMES: usize = 10;
/// The longest line shown; longer ones are cut.
const LINE: usize = 160;

/// `error` (a failed call's) with `stderr`, what the guest wrote during the call.
pub(crate) fn describe(error: &wasmtime::Error, stderr: &str) -> String {
    let backtrace = error.downcast_ref::<WasmBacktrace>();
    let mut out = reason(error, backtrace);
    let lines = last_lines(stderr);
    if !lines.is_empty() {
        out.push_str("\n  stderr:");
        for line in lines {
            out.push_str("\n    ");
            out.push_str(&cut(line));
        }
    }
    if let Some(backtrace) = backtrace
        && !backtrace.frames().is_empty()
    {
        out.push_str("\n  wasm backtrace:");
        let frames = backtrace.frames();
        for (i, frame) in frames.iter().take(FRAMES).enumerate() {
            out.push_str(&format!("\n    {i:>2}: {}", cut(&describe_frame(frame))));
        }
        if frames.len() > FRAMES {
            out.push_str(&format!(
                "\n        ... {} more frames",
                frames.len() - FRAMES
            ));
        }
    }
    out
}

/// The error's chain but the backtrace (whose text is the whole trace), outermost first:
/// `wasm trap: ...`, or the host's reason (`memory limit ... reached`, ...).
fn reason(error: &wasmtime::Error, backtrace: Option<&WasmBacktrace>) -> String {
    let trace = backtrace.map(ToString::to_string);
    let parts: Vec<String> = error
        .chain()
        .map(|e| e.to_string())
        .filter(|text| Some(text) != trace.as_ref())
        .collect();
    if parts.is_empty() {
        "trapped".to_owned()
    } else {
        parts.join(": ")
    }
}

/// The last [`STDERR_LINES`] non-blank lines of `text`.
fn last_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(STDERR_LINES)..].to_vec()
}

/// `module!function`, demangled, with the source line when the module has debug info.
fn describe_frame(frame: &FrameInfo) -> String {
    let function = match frame.func_name() {
        Some(name) => format!("{:#}", rustc_demangle::demangle(name)),
        None => format!("<wasm function {}>", frame.func_index()),
    };
    let mut text = match frame.module().name() {
        Some(module) => format!("{module}!{function}"),
        None => function,
    };
    if let Some(symbol) = frame.symbols().first()
        && let Some(file) = symbol.file()
    {
        text.push_str(&format!(" at {file}"));
        if let Some(line) = symbol.line() {
            text.push_str(&format!(":{line}"));
        }
    } else if let Some(offset) = frame.module_offset() {
        text.push_str(&format!(" (offset {offset:#x})"));
    }
    text
}

/// `line` cut to [`LINE`] characters.
fn cut(line: &str) -> String {
    match line.char_indices().nth(LINE) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_gives_its_last_non_blank_lines_each_cut() {
        let text: String = (0..30).map(|i| format!("line {i}\n\n")).collect();
        let lines = last_lines(&text);
        assert_eq!(lines.len(), STDERR_LINES);
        assert_eq!(lines.first(), Some(&"line 18"));
        assert_eq!(lines.last(), Some(&"line 29"));
        assert!(last_lines("").is_empty());
        let long = "é".repeat(LINE + 10);
        assert_eq!(cut(&long).chars().count(), LINE + 1);
        assert_eq!(cut("short"), "short");
    }
}
