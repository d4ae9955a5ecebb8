//! The time source: the wall clock for real runs and a manual, virtual clock for simulations
//! and tests. Everything that reads "now" (template `Now`, delays) takes an [`Arc<dyn Clock>`],
//! so a simulation can move time forward without sleeping.
//!
//! [`Arc<dyn Clock>`]: std::sync::Arc

use std::sync::{Mutex, PoisonError};

use chrono::{DateTime, TimeDelta, Utc};

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A virtual clock that only moves when told to.
///
/// Share it as `Arc<ManualClock>`: every holder sees [`ManualClock::set`] and
/// [`ManualClock::advance`] at once, and the `Arc` coerces to `Arc<dyn Clock>`.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    /// A clock showing `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    /// The time the clock shows.
    pub fn now(&self) -> DateTime<Utc> {
        *self.lock()
    }

    /// Moves the clock to `t` (backwards too).
    pub fn set(&self, t: DateTime<Utc>) {
        *self.lock() = t;
    }

    /// Moves the clock by `delta` (negative moves it back); saturates at the ends of
    /// chrono's range instead of overflowing. Returns the new time.
    pub fn advance(&self, delta: TimeDelta) -> DateTime<Utc> {
        let mut now = self.lock();
        let next = now
            .checked_add_signed(delta)
            .unwrap_or(if delta < TimeDelta::zero() {
                DateTime::<Utc>::MIN_UTC
            } else {
                DateTime::<Utc>::MAX_UTC
            });
        *now = next;
        next
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DateTime<Utc>> {
        // A poisoned lock still holds a valid time: a `DateTime` has no invariant a panic
        // could break half-way.
        self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        ManualClock::now(self)
    }
}

/// Wall time that follows tokio's clock: it starts at a given time and advances with
/// `tokio::time::Instant`, so under paused tokio time (tests, `kstage sim`) it is virtual
/// and exact.
///
/// tokio reads a paused clock only inside its runtime's context: a thread outside it (a
/// plugin's call on a thread of its own) would read the real clock. So the clock keeps
/// the handle of the runtime it was made in, and enters it to read the time from
/// elsewhere.
#[derive(Debug)]
pub struct TokioClock {
    start: DateTime<Utc>,
    origin: tokio::time::Instant,
    runtime: Option<tokio::runtime::Handle>,
}

impl TokioClock {
    /// A clock showing `start` now, following the current runtime's clock (the real one
    /// when made outside a runtime).
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            start,
            origin: tokio::time::Instant::now(),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let now = match (&self.runtime, tokio::runtime::Handle::try_current()) {
            (Some(runtime), Err(_)) => {
                let _context = runtime.enter();
                tokio::time::Instant::now()
            }
            _ => tokio::time::Instant::now(),
        };
        let elapsed = now.saturating_duration_since(self.origin);
        self.start + TimeDelta::from_std(elapsed).unwrap_or(TimeDelta::MAX)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::TimeZone;

    use super::*;

    fn start() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2006, 1, 2, 15, 4, 5)
            .single()
            .expect("valid time")
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(start());
        assert_eq!(clock.now(), start());
        assert_eq!(clock.now(), start());
        let t = clock.advance(TimeDelta::milliseconds(1500));
        assert_eq!(t, start() + TimeDelta::milliseconds(1500));
        assert_eq!(clock.now(), t);
        clock.set(start());
        assert_eq!(clock.now(), start());
        clock.advance(TimeDelta::seconds(-5));
        assert_eq!(clock.now(), start() - TimeDelta::seconds(5));
    }

    #[test]
    fn manual_clock_is_shared_through_arc() {
        let clock = Arc::new(ManualClock::new(start()));
        let as_dyn: Arc<dyn Clock> = clock.clone();
        clock.advance(TimeDelta::seconds(60));
        assert_eq!(as_dyn.now(), start() + TimeDelta::seconds(60));
    }

    #[test]
    fn manual_clock_saturates() {
        let clock = ManualClock::new(DateTime::<Utc>::MAX_UTC - TimeDelta::seconds(1));
        assert_eq!(
            clock.advance(TimeDelta::days(3650)),
            DateTime::<Utc>::MAX_UTC
        );
        clock.set(DateTime::<Utc>::MIN_UTC + TimeDelta::seconds(1));
        assert_eq!(
            clock.advance(TimeDelta::days(-3650)),
            DateTime::<Utc>::MIN_UTC
        );
    }

    #[test]
    fn system_clock_is_close_to_now() {
        let before = Utc::now();
        let t = SystemClock.now();
        assert!(t >= before);
        assert!(t - before < TimeDelta::seconds(5));
    }

    #[test]
    fn tokio_clock_shows_virtual_time_to_threads_outside_the_runtime() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        let clock = Arc::new(runtime.block_on(async { TokioClock::new(start()) }));
        runtime.block_on(tokio::time::advance(std::time::Duration::from_secs(3600)));
        let elsewhere = clock.clone();
        let seen = std::thread::spawn(move || elsewhere.now())
            .join()
            .expect("thread");
        assert_eq!(seen, start() + TimeDelta::hours(1));
        assert_eq!(clock.now(), seen);
    }

    #[test]
    fn clocks_are_send_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<SystemClock>();
        check::<ManualClock>();
        check::<Arc<dyn Clock>>();
    }
}
