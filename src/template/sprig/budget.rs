//! The per-render budget of what functions build: `{{ range until 100000 }}` with
//! `repeat 100000 "x"` inside would otherwise allocate gigabytes before the output bound
//! ([`super::super::MAX_OUTPUT`]) sees a byte. Every function that builds a value in
//! proportion to its arguments (`repeat`, `until`, `seq`, `indent`, ...) or does costly
//! work (key and certificate generation) charges its size here *before* allocating;
//! a render may charge [`BUDGET`] bytes in all.

use std::cell::Cell;

/// What one render's functions may build, in bytes: the same bound as the output.
pub(crate) const BUDGET: usize = super::super::MAX_OUTPUT;

thread_local! {
    static LEFT: Cell<usize> = const { Cell::new(BUDGET) };
}

/// Starts a render with the whole budget (a render runs on one thread).
pub(crate) fn reset() {
    LEFT.with(|left| left.set(BUDGET));
}

/// Takes `bytes` from the budget.
///
/// # Errors
/// When less than `bytes` is left; the budget is then spent.
pub(crate) fn charge(bytes: usize) -> Result<(), String> {
    LEFT.with(|left| match left.get().checked_sub(bytes) {
        Some(rest) => {
            left.set(rest);
            Ok(())
        }
        None => {
            left.set(0);
            Err(format!(
                "the values built by this render's functions are over {BUDGET} bytes"
            ))
        }
    })
}
