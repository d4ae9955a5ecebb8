//! The loop guard: an object that plays the same Stage again and again, faster than
//! [`LoopGuard`] allows, is slowed down.
//!
//! A Stage with no delay whose output still matches it (KWOK has the same failure mode)
//! would otherwise be played as fast as the cluster answers, for ever: thousands of
//! writes and Events a second, and in `kstage sim` a loop at one virtual instant. The
//! guard counts, per object, how often the Stage it just played was the one it played
//! before, within [`LoopGuard::window`]; past [`LoopGuard::burst`] plays, the next match
//! of that Stage waits one window, then twice as long each time it is played again (up
//! to [`LoopGuard::max_delay`]). Playing another Stage, or going away, ends it. A Stage
//! that comes back with its own delay (a periodic heartbeat) never reaches the burst.

use std::time::Duration;

use tokio::time::Instant;

/// How fast one object may play the same Stage again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopGuard {
    /// Plays of the same Stage within `window` that are still fine.
    pub burst: u32,
    /// The window, and the first delay of an object over the burst.
    pub window: Duration,
    /// The longest delay (doubling from `window`).
    pub max_delay: Duration,
}

impl Default for LoopGuard {
    /// 20 plays in a second; then 1 s, 2 s, ... up to a minute between plays.
    fn default() -> Self {
        Self {
            burst: 20,
            window: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
        }
    }
}

impl LoopGuard {
    /// No guard: any number of plays.
    pub fn off() -> Self {
        Self {
            burst: u32::MAX,
            ..Self::default()
        }
    }
}

/// One object's recent plays of one Stage.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Reentry {
    /// The Stage last played (its address: a reloaded Stage counts as another).
    stage: usize,
    /// Start of the current window.
    since: Option<Instant>,
    /// Plays of `stage` in the window.
    count: u32,
    /// The delay added to the next match of `stage` (zero: not slowed).
    penalty: Duration,
}

impl Reentry {
    /// `stage` was played to its end at `now`. Says whether the object is slowed down
    /// from now on (the first time only).
    pub(super) fn played(&mut self, stage: usize, now: Instant, guard: &LoopGuard) -> bool {
        let since = match self.since {
            Some(since) if self.stage == stage => since,
            _ => {
                *self = Reentry {
                    stage,
                    since: Some(now),
                    count: 1,
                    penalty: Duration::ZERO,
                };
                return false;
            }
        };
        if !self.penalty.is_zero() {
            self.penalty = (self.penalty * 2).min(guard.max_delay);
            return false;
        }
        if now.saturating_duration_since(since) > guard.window {
            self.since = Some(now);
            self.count = 1;
            return false;
        }
        self.count = self.count.saturating_add(1);
        if self.count > guard.burst {
            self.penalty = guard.window.min(guard.max_delay);
            return true;
        }
        false
    }

    /// The delay to add when `stage` matches the object next.
    pub(super) fn penalty(&self, stage: usize) -> Duration {
        if self.stage == stage {
            self.penalty
        } else {
            Duration::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_stage_played_faster_than_the_burst_is_slowed_with_doubling_delays() {
        let guard = LoopGuard {
            burst: 3,
            window: Duration::from_secs(1),
            max_delay: Duration::from_secs(4),
        };
        let mut r = Reentry::default();
        let now = Instant::now();
        // Three plays in the window are fine; the fourth slows the object down, once.
        assert!(!r.played(1, now, &guard));
        assert!(!r.played(1, now, &guard));
        assert!(!r.played(1, now, &guard));
        assert_eq!(r.penalty(1), Duration::ZERO);
        assert!(r.played(1, now, &guard));
        assert_eq!(r.penalty(1), Duration::from_secs(1));
        assert_eq!(r.penalty(2), Duration::ZERO, "only for that Stage");
        // Each further play doubles the delay, up to the maximum.
        for expected in [2, 4, 4] {
            assert!(!r.played(1, now + Duration::from_secs(10), &guard));
            assert_eq!(r.penalty(1), Duration::from_secs(expected));
        }
        // Another Stage ends it.
        assert!(!r.played(2, now, &guard));
        assert_eq!(
            (r.penalty(1), r.penalty(2)),
            (Duration::ZERO, Duration::ZERO)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stage_that_comes_back_slower_than_the_window_is_never_slowed() {
        let guard = LoopGuard::default();
        let mut r = Reentry::default();
        let start = Instant::now();
        for i in 0..1000u64 {
            // Ten a second: a heartbeat, half the burst per window.
            let at = start + Duration::from_millis(100 * i);
            assert!(!r.played(7, at, &guard));
            assert_eq!(r.penalty(7), Duration::ZERO);
        }
    }
}
