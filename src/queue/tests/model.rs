//! A Vec-based reference model, checked against the queue over random operations.

use std::time::Duration;

use proptest::prelude::*;
use tokio::time::{Instant, advance};

use crate::queue::state::CREDIT_SCALE;
use crate::queue::{QueueConfig, WeightedQueue};

#[derive(Debug, Clone)]
enum Op {
    /// `add` with a delay (tokio clock).
    Add {
        key: u8,
        weight: u32,
        delay_ms: u64,
    },
    /// `add_at` relative to the clock, often in the past.
    AddAt {
        key: u8,
        weight: u32,
        offset_ms: i64,
    },
    Cancel {
        key: u8,
    },
    Advance {
        ms: u64,
    },
    /// `try_pop_due` at the clock.
    Pop,
    /// `try_pop_due` ahead of the clock, as a simulator may do.
    PopAhead {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..12, 0u32..3, prop_oneof![Just(0u64), 0u64..40])
            .prop_map(|(key, weight, delay_ms)| Op::Add { key, weight, delay_ms }),
        1 => (0u8..12, 0u32..3, -40i64..20)
            .prop_map(|(key, weight, offset_ms)| Op::AddAt { key, weight, offset_ms }),
        1 => (0u8..12).prop_map(|key| Op::Cancel { key }),
        2 => (0u64..20).prop_map(|ms| Op::Advance { ms }),
        4 => Just(Op::Pop),
        1 => (1u64..20).prop_map(|ms| Op::PopAhead { ms }),
    ]
}

struct Job {
    key: u8,
    id: u64,
    weight: u32,
    due: Instant,
    seq: u64,
}

/// The obvious implementation: scan everything on every pop.
struct Model {
    jobs: Vec<Job>,
    seq: u64,
    share: u32,
    credit: u32,
    /// Latest instant observed by an add or a pop (the queue's watermark).
    seen: Option<Instant>,
}

impl Model {
    fn ready(&self, job: &Job) -> bool {
        self.seen.is_some_and(|seen| job.due <= seen)
    }

    fn observe(&mut self, now: Option<Instant>) {
        self.seen = self.seen.max(now);
    }

    fn add(
        &mut self,
        key: u8,
        id: u64,
        weight: u32,
        due: Instant,
        now: Option<Instant>,
    ) -> Option<u64> {
        self.observe(now);
        let old = self.cancel(key);
        self.jobs.push(Job {
            key,
            id,
            weight,
            due,
            seq: self.seq,
        });
        self.seq += 1;
        old
    }

    fn cancel(&mut self, key: u8) -> Option<u64> {
        let i = self.jobs.iter().position(|j| j.key == key)?;
        Some(self.jobs.remove(i).id)
    }

    fn pop(&mut self, now: Instant) -> Option<(u8, u64)> {
        self.observe(Some(now));
        let ready = || self.jobs.iter().filter(|j| self.ready(j));
        let high = ready().map(|j| j.weight).max()?;
        let low = ready().map(|j| j.weight).min()?;
        let lane = if high == low {
            high
        } else {
            self.credit += self.share;
            if self.credit >= CREDIT_SCALE {
                self.credit -= CREDIT_SCALE;
                low
            } else {
                high
            }
        };
        let i = self
            .jobs
            .iter()
            .enumerate()
            .filter(|(_, j)| j.weight == lane && self.ready(j))
            .min_by_key(|(_, j)| (j.due, j.seq))
            .map(|(i, _)| i)?;
        let job = self.jobs.remove(i);
        Some((job.key, job.id))
    }

    fn len_ready(&self) -> usize {
        self.jobs.iter().filter(|j| self.ready(j)).count()
    }

    /// (ready, delayed) of one lane.
    fn lane(&self, weight: u32) -> (usize, usize) {
        let lane = self.jobs.iter().filter(|j| j.weight == weight);
        let ready = lane.clone().filter(|j| self.ready(j)).count();
        (ready, lane.count() - ready)
    }
}

fn run(share: f64, ops: &[Op]) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    rt.block_on(async {
        let q: WeightedQueue<u8, u64> =
            WeightedQueue::new(QueueConfig::default().low_lane_share(share))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut model = Model {
            jobs: Vec::new(),
            seq: 0,
            share: (share * f64::from(CREDIT_SCALE)).round() as u32,
            credit: 0,
            seen: None,
        };
        let (mut replaced, mut cancelled) = (0, 0);
        for (id, op) in (0u64..).zip(ops) {
            let now = Instant::now();
            match *op {
                Op::Add {
                    key,
                    weight,
                    delay_ms,
                } => {
                    let delay = Duration::from_millis(delay_ms);
                    let got = q.add(key, id, weight, delay);
                    let want = model.add(key, id, weight, now + delay, Some(now));
                    prop_assert_eq!(got, want, "add {:?}", op);
                    replaced += u64::from(want.is_some());
                }
                Op::AddAt {
                    key,
                    weight,
                    offset_ms,
                } => {
                    let offset = Duration::from_millis(offset_ms.unsigned_abs());
                    let due = if offset_ms < 0 {
                        now - offset
                    } else {
                        now + offset
                    };
                    let got = q.add_at(key, id, weight, due);
                    let want = model.add(key, id, weight, due, None);
                    prop_assert_eq!(got, want, "add_at {:?}", op);
                    replaced += u64::from(want.is_some());
                }
                Op::Cancel { key } => {
                    let want = model.cancel(key);
                    prop_assert_eq!(q.cancel(&key), want, "cancel {}", key);
                    cancelled += u64::from(want.is_some());
                }
                Op::Advance { ms } => advance(Duration::from_millis(ms)).await,
                Op::Pop => prop_assert_eq!(q.try_pop_due(now), model.pop(now), "pop"),
                Op::PopAhead { ms } => {
                    let ahead = now + Duration::from_millis(ms);
                    prop_assert_eq!(q.try_pop_due(ahead), model.pop(ahead), "pop ahead");
                }
            }
            prop_assert_eq!(q.len(), model.jobs.len());
            prop_assert_eq!(q.len_ready(), model.len_ready());
            prop_assert_eq!(q.len_delayed(), model.jobs.len() - model.len_ready());
            prop_assert_eq!(q.next_due(), model.jobs.iter().map(|j| j.due).min());
            for weight in 0..3 {
                let lane = q.lane(weight);
                prop_assert_eq!((lane.ready, lane.delayed), model.lane(weight));
            }
            for key in 0..12 {
                prop_assert_eq!(q.contains(&key), model.jobs.iter().any(|j| j.key == key));
            }
        }
        let stats = q.stats();
        prop_assert_eq!((stats.replaced, stats.cancelled), (replaced, cancelled));
        // Whatever is left comes out in model order once everything is due.
        advance(Duration::from_secs(1)).await;
        let now = Instant::now();
        loop {
            let want = model.pop(now);
            prop_assert_eq!(q.try_pop_due(now), want);
            if want.is_none() {
                break;
            }
        }
        Ok::<(), TestCaseError>(())
    })
}

proptest! {
    #[test]
    fn queue_matches_model(
        share in prop_oneof![Just(0.0), Just(0.2), Just(0.5), Just(1.0), 0.0f64..=1.0],
        ops in prop::collection::vec(op(), 0..120),
    ) {
        run(share, &ops)?;
    }
}
