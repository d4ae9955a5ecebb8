//! What can go wrong with a plugin, as data: every error names the plugin, the export and
//! the cause, so a log line or a `kstage plugin check` report says what to fix.

use std::path::PathBuf;
use std::time::Duration;

/// A call into a plugin that did not produce a usable answer.
#[derive(Debug, Clone, thiserror::Error)]
#[error("plugin {plugin}: {export}: {cause}")]
pub struct CallError {
    /// The plugin's configured name.
    pub plugin: String,
    /// The export called (`selector.select`, ...).
    pub export: &'static str,
    /// Why.
    pub cause: Cause,
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Cause {
    /// The call ran past its deadline and was interrupted.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The plugin tried to grow its memory past its limit.
    #[error("out of memory (limit {limit} bytes)")]
    OutOfMemory {
        /// The limit, in bytes.
        limit: u64,
    },
    /// The plugin trapped (a panic, `unreachable`, an out-of-bounds access ...): the
    /// reason, the last lines of the guest's stderr, the top of the wasm backtrace.
    #[error("trapped: {0}")]
    Trap(String),
    /// The plugin answered something kstage cannot use.
    #[error("malformed output: {0}")]
    Malformed(String),
    /// The plugin answered with an error of its own.
    #[error("returned an error: {0}")]
    Guest(String),
    /// The plugin does not export this capability.
    #[error("not exported by the plugin")]
    Missing,
    /// A binding names a plugin the config does not list.
    #[error("no plugin of this name is configured")]
    NotConfigured,
}

/// The most bytes of a plugin's own text (its error, its trap message, what was wrong
/// with its answer) an error keeps: a plugin's answer may be megabytes long.
pub const MAX_CAUSE_TEXT: usize = 2048;

/// The most bytes of a trap's text kept: its reason, the guest's last lines of stderr
/// and the top of its wasm backtrace (each bounded in lines and line length).
pub const MAX_TRAP_TEXT: usize = 4096;

/// `text` cut to [`MAX_CAUSE_TEXT`] bytes (at a character boundary), saying how long it was.
pub fn bounded_text(text: String) -> String {
    bounded_to(text, MAX_CAUSE_TEXT)
}

fn bounded_to(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

impl Cause {
    /// The cause with any text from the plugin cut to [`MAX_CAUSE_TEXT`] bytes.
    pub fn bounded(self) -> Self {
        match self {
            Cause::Trap(t) => Cause::Trap(bounded_to(t, MAX_TRAP_TEXT)),
            Cause::Malformed(t) => Cause::Malformed(bounded_text(t)),
            Cause::Guest(t) => Cause::Guest(bounded_text(t)),
            other => other,
        }
    }

    /// A stable lower-case name, for metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Cause::Timeout(_) => "timeout",
            Cause::OutOfMemory { .. } => "out-of-memory",
            Cause::Trap(_) => "trap",
            Cause::Malformed(_) => "malformed",
            Cause::Guest(_) => "guest-error",
            Cause::Missing => "missing",
            Cause::NotConfigured => "not-configured",
        }
    }

    /// Whether the instance that produced this may serve another call. A trap, a timeout
    /// or a memory overrun leaves the instance in an unknown state: it is discarded.
    pub fn poisons(&self) -> bool {
        matches!(
            self,
            Cause::Timeout(_) | Cause::OutOfMemory { .. } | Cause::Trap(_)
        )
    }
}

/// A plugin file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("plugin {plugin} ({}): {problem}", path.display())]
pub struct LoadError {
    /// The plugin's configured name.
    pub plugin: String,
    /// Where it was read from.
    pub path: PathBuf,
    /// What is wrong with it.
    pub problem: String,
}

/// A renderer plugin's failure is the step's render error.
impl From<CallError> for crate::decide::RenderError {
    fn from(error: CallError) -> Self {
        crate::decide::RenderError::Plugin(Box::new(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugins_text_is_cut_in_errors() {
        let huge = "é".repeat(50 << 20);
        let cause = Cause::Guest(huge.clone()).bounded();
        let Cause::Guest(text) = &cause else {
            panic!("{cause:?}");
        };
        assert!(text.len() < MAX_CAUSE_TEXT + 64, "{} bytes", text.len());
        assert!(
            text.ends_with(&format!("({} bytes in all)", huge.len())),
            "{}",
            &text[text.len() - 40..]
        );
        assert_eq!(
            Cause::Trap("short".into()).bounded(),
            Cause::Trap("short".into())
        );
        assert_eq!(Cause::Missing.bounded(), Cause::Missing);
    }
}
