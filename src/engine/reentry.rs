//! The loop guard: an object whose Stages play back to back, with no delay of their own,
//! faster than [`LoopGuard`] allows, is slowed down, however many Stages take part.
//!
//! A Stage with no delay whose output still matches it, or two (or more) such Stages
//! whose outputs match each other (`ping` sets what `pong` matches and `pong` resets it),
//! would otherwise be played as fast as the cluster answers, for ever: thousands of
//! writes and Events a second, and in `kstage sim` a loop at one virtual instant. KWOK
//! has the same failure mode.
//!
//! The guard follows each object's *chain*: a play continues the chain when its Stage
//! had no delay of its own and the object was matched to it within [`LoopGuard::window`]
//! of the previous play's end (back to back: the object's newest version matched the
//! next Stage at once). Past [`LoopGuard::burst`] plays of a chain within one window, the
//! next match of any Stage without a delay of its own waits one window, then twice as
//! long each time the chain plays again (up to [`LoopGuard::max_delay`]). A Stage that
//! waited a delay of its own (a periodic heartbeat) ends the chain and is never slowed;
//! so does an object left alone past the window, or going away.

use std::time::Duration;

use tokio::time::Instant;

/// How fast one object may play Stages back to back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopGuard {
    /// Plays of one chain within `window` that are still fine.
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

/// How many distinct Stages of a chain are remembered (to name them when it is slowed).
const NAMED: usize = 4;

/// One object's chain of back-to-back plays. Small and `Copy`: every watched object has
/// one.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Reentry {
    /// When the last play ended (`None`: no play yet).
    last: Option<Instant>,
    /// Start of the current window.
    since: Option<Instant>,
    /// Plays of the chain in the window.
    count: u32,
    /// The first distinct Stages of the chain (their addresses: a reloaded Stage counts
    /// as another), `named` of them.
    stages: [usize; NAMED],
    named: u8,
    /// Distinct Stages of the chain past the ones in `stages`.
    more: bool,
    /// The delay added to the next back-to-back match (zero: not slowed).
    penalty: Duration,
}

/// A play the guard is told about.
#[derive(Debug, Clone, Copy)]
pub(super) struct Play {
    /// The Stage played (its address).
    pub(super) stage: usize,
    /// When the object was matched to it, if the Stage had no delay of its own (`None`:
    /// it waited one).
    pub(super) matched_back_to_back: Option<Instant>,
}

impl Reentry {
    /// `play` ended at `now`. Says whether the object is slowed down from now on (the
    /// first time only).
    pub(super) fn played(&mut self, play: Play, now: Instant, guard: &LoopGuard) -> bool {
        let continues = match (play.matched_back_to_back, self.last) {
            (Some(matched), Some(last)) => matched.saturating_duration_since(last) <= guard.window,
            _ => false,
        };
        if !continues {
            *self = Reentry {
                last: Some(now),
                since: Some(now),
                count: u32::from(play.matched_back_to_back.is_some()),
                ..Reentry::default()
            };
            self.remember(play.stage);
            return false;
        }
        self.last = Some(now);
        self.remember(play.stage);
        if !self.penalty.is_zero() {
            self.penalty = (self.penalty * 2).min(guard.max_delay);
            return false;
        }
        let since = self.since.unwrap_or(now);
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

    fn remember(&mut self, stage: usize) {
        let named = usize::from(self.named);
        if self.stages[..named].contains(&stage) {
            return;
        }
        if named < NAMED {
            self.stages[named] = stage;
            self.named += 1;
        } else {
            self.more = true;
        }
    }

    /// The delay to add to the next match, when its Stage has no delay of its own.
    pub(super) fn penalty(&self) -> Duration {
        self.penalty
    }

    /// The Stages of the chain, in the order they first played (the first few), and
    /// whether there were more.
    pub(super) fn stages(&self) -> (&[usize], bool) {
        (&self.stages[..usize::from(self.named)], self.more)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn back_to_back(stage: usize, matched: Instant) -> Play {
        Play {
            stage,
            matched_back_to_back: Some(matched),
        }
    }

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
        assert!(!r.played(back_to_back(1, now), now, &guard));
        assert!(!r.played(back_to_back(1, now), now, &guard));
        assert!(!r.played(back_to_back(1, now), now, &guard));
        assert_eq!(r.penalty(), Duration::ZERO);
        assert!(r.played(back_to_back(1, now), now, &guard));
        assert_eq!(r.penalty(), Duration::from_secs(1));
        assert_eq!(r.stages(), (&[1][..], false));
        // Each further play doubles the delay, up to the maximum: the object was matched
        // at once after each play, and waited only the penalty.
        let mut at = now;
        for expected in [2, 4, 4] {
            let matched = at;
            at += r.penalty();
            assert!(!r.played(back_to_back(1, matched), at, &guard));
            assert_eq!(r.penalty(), Duration::from_secs(expected));
        }
        // A Stage that waited a delay of its own ends it.
        let other = Play {
            stage: 2,
            matched_back_to_back: None,
        };
        assert!(!r.played(other, at, &guard));
        assert_eq!(r.penalty(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn stages_that_undo_each_other_are_one_chain() {
        let guard = LoopGuard {
            burst: 5,
            ..LoopGuard::default()
        };
        let mut r = Reentry::default();
        let now = Instant::now();
        // ping, pong, ping, pong ... at one instant: one chain of two Stages.
        let slowed: Vec<bool> = (0..6)
            .map(|i| r.played(back_to_back(10 + i % 2, now), now, &guard))
            .collect();
        assert_eq!(slowed, [false, false, false, false, false, true]);
        assert_eq!(r.stages(), (&[10, 11][..], false));
        // Three Stages in a ring are one chain too, named as they first played.
        let mut r = Reentry::default();
        let slowed = (0..6)
            .map(|i| r.played(back_to_back(20 + i % 3, now), now, &guard))
            .filter(|s| *s)
            .count();
        assert_eq!(slowed, 1);
        assert_eq!(r.stages(), (&[20, 21, 22][..], false));
        // More Stages than are named: the first ones, and a mark.
        let mut r = Reentry::default();
        for i in 0..6 {
            r.played(back_to_back(i, now), now, &guard);
        }
        assert_eq!(r.stages(), (&[0, 1, 2, 3][..], true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stage_that_comes_back_on_its_own_delay_is_never_slowed() {
        let guard = LoopGuard::default();
        let mut r = Reentry::default();
        let start = Instant::now();
        for i in 0..1000u64 {
            // Ten a second, each after a delay of its own: a heartbeat.
            let at = start + Duration::from_millis(100 * i);
            let play = Play {
                stage: 7,
                matched_back_to_back: None,
            };
            assert!(!r.played(play, at, &guard));
            assert_eq!(r.penalty(), Duration::ZERO);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_object_matched_long_after_its_last_play_starts_a_new_chain() {
        let guard = LoopGuard {
            burst: 2,
            ..LoopGuard::default()
        };
        let mut r = Reentry::default();
        let now = Instant::now();
        for _ in 0..2 {
            assert!(!r.played(back_to_back(1, now), now, &guard));
        }
        // Someone changed the object a minute later: a new chain, not the loop's third
        // play.
        let later = now + Duration::from_secs(60);
        assert!(!r.played(back_to_back(1, later), later, &guard));
        assert!(!r.played(back_to_back(1, later), later, &guard));
        assert!(r.played(back_to_back(1, later), later, &guard));
    }
}
