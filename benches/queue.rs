//! Micro-benchmarks of the weighted delaying queue (`kstage::queue`), on the synchronous
//! `try_pop_due` path, with 100,000 jobs queued.
//!
//! Targets: an add + pop pair ≤ 500 ns (≥ 2 million pairs/s); replace and cancel < 1 µs.
//!
//! ```text
//! cargo bench --bench queue
//! ```

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kstage::queue::{QueueConfig, WeightedQueue};
use tokio::time::Instant;

/// Jobs kept queued during every measurement.
const QUEUED: u64 = 100_000;
const FRESH: u32 = 1;
const RETRY: u32 = 0;

/// A small deterministic xorshift, so runs are comparable.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A job payload about the size of an engine job (stage index, step, attempt, version).
#[derive(Clone, Copy)]
struct Job(#[expect(dead_code, reason = "payload only")] [u64; 4]);

fn new_queue() -> WeightedQueue<u64, Job> {
    match WeightedQueue::new(QueueConfig::default()) {
        Ok(q) => q,
        Err(err) => panic!("default config: {err}"),
    }
}

/// Steady state: one add and one pop per iteration, 100k ready jobs queued.
fn add_pop(c: &mut Criterion) {
    let mut group = c.benchmark_group("queue/add_pop_pair");
    group.throughput(Throughput::Elements(1));

    // One lane, no delay: the FIFO path.
    group.bench_function("one_lane_100k", |b| {
        let q = new_queue();
        for k in 0..QUEUED {
            q.add(k, Job([k; 4]), FRESH, Duration::ZERO);
        }
        let now = Instant::now();
        let mut next = QUEUED;
        b.iter(|| {
            q.add(next, Job([next; 4]), FRESH, Duration::ZERO);
            next += 1;
            black_box(q.try_pop_due(now))
        });
    });

    // Two lanes (the low-lane credit is spent every fifth pop) and delayed jobs that are
    // promoted by the pops, as workers see under a flood with retries.
    group.bench_function("two_lanes_delayed_100k", |b| {
        let q = new_queue();
        let base = Instant::now();
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for k in 0..QUEUED {
            let lane = if k.is_multiple_of(4) { RETRY } else { FRESH };
            q.add_at(
                k,
                Job([k; 4]),
                lane,
                base + Duration::from_micros(rng.below(1_000)),
            );
        }
        let mut now = base + Duration::from_millis(1);
        // Promote the initial jobs outside the measurement, and put the popped one back.
        if let Some((key, job)) = q.try_pop_due(now) {
            q.add_at(key, job, FRESH, now);
        }
        let mut next = QUEUED;
        b.iter(|| {
            let lane = if next.is_multiple_of(4) { RETRY } else { FRESH };
            let due = now + Duration::from_micros(rng.below(1_000));
            q.add_at(next, Job([next; 4]), lane, due);
            next += 1;
            now += Duration::from_nanos(10_000);
            black_box(q.try_pop_due(now))
        });
    });
    group.finish();
}

/// Replace a random queued key's job (delayed or ready), and cancel + re-add one.
fn replace_cancel(c: &mut Criterion) {
    let mut group = c.benchmark_group("queue/by_key");
    group.throughput(Throughput::Elements(1));
    let q = new_queue();
    let base = Instant::now();
    for k in 0..QUEUED {
        let delay = if k.is_multiple_of(2) {
            Duration::ZERO
        } else {
            Duration::from_secs(60)
        };
        q.add(k, Job([k; 4]), FRESH, delay);
    }
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);

    group.bench_function("replace_100k", |b| {
        b.iter(|| {
            let key = rng.below(QUEUED);
            let due = base + Duration::from_millis(rng.below(120_000));
            black_box(q.add_at(key, Job([key; 4]), FRESH, due))
        });
    });

    group.bench_function("cancel_100k", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let key = rng.below(QUEUED);
                let start = std::time::Instant::now();
                let job = black_box(q.cancel(&key));
                spent += start.elapsed();
                if let Some(job) = job {
                    q.add_at(key, job, FRESH, base + Duration::from_secs(60));
                }
            }
            spent
        });
    });

    group.bench_function("cancel_and_readd_100k", |b| {
        b.iter(|| {
            let key = rng.below(QUEUED);
            if let Some(job) = q.cancel(&key) {
                q.add_at(key, job, FRESH, base + Duration::from_secs(60));
            }
        });
    });
    group.finish();
}

criterion_group!(benches, add_pop, replace_cancel);
criterion_main!(benches);
