//! The threads that call components importing WASI when the caller is on a tokio
//! runtime's thread: wasmtime-wasi's synchronous bindings block on a runtime of their
//! own, which tokio forbids on its threads.
//!
//! A fixed pool of plain threads takes such calls: rayon's (already in the build through
//! wasmtime), whose `install` runs a closure that borrows the caller's data on a pool
//! thread and blocks the caller until it returns. A call then costs a hand-off between
//! two threads instead of spawning one: spawning a thread per call made a Go or Python
//! selector in `kstage sim` cost about 250 µs per play instead of the call's 20–40 µs.

use std::panic::AssertUnwindSafe;
use std::sync::LazyLock;

/// The pool, or `None` when the threads could not be started (a call then spawns a
/// thread of its own).
static POOL: LazyLock<Option<rayon::ThreadPool>> = LazyLock::new(|| {
    let threads = std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1)
        .max(4);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("kstage-plugin-{i}"))
        .build()
        .ok()
});

/// `run` on a thread outside tokio; `Err` when it panicked.
pub(super) fn run_off_runtime<R: Send>(run: impl FnOnce() -> R + Send) -> Result<R, ()> {
    let guarded = move || std::panic::catch_unwind(AssertUnwindSafe(run)).map_err(|_| ());
    match &*POOL {
        Some(pool) => pool.install(guarded),
        None => std::thread::scope(|scope| scope.spawn(guarded).join().unwrap_or(Err(()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_borrowing_closures_outside_the_runtime_and_reports_panics() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let data = [1, 2, 3];
        let (sum, outside) = runtime.block_on(async {
            run_off_runtime(|| {
                (
                    data.iter().sum::<i32>(),
                    tokio::runtime::Handle::try_current().is_err(),
                )
            })
            .expect("no panic")
        });
        assert_eq!(sum, 6);
        assert!(outside, "the closure ran on a tokio thread");
        assert!(run_off_runtime(|| panic!("boom")).is_err());
    }
}
