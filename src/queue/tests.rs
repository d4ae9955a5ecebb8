//! Queue tests: ordering, replace and cancel in every position, the low-lane share, the
//! async pop under paused time, and a property test against a Vec-based model.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{Instant, advance};

use super::{LaneStats, QueueConfig, QueueConfigError, WeightedQueue};

const FRESH: u32 = 1;
const RETRY: u32 = 0;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn queue<J>(share: f64) -> WeightedQueue<u32, J> {
    WeightedQueue::new(QueueConfig::default().low_lane_share(share)).expect("valid config")
}

/// Pops every due job at `now`, in order.
fn drain<J>(q: &WeightedQueue<u32, J>, now: Instant) -> Vec<(u32, J)> {
    std::iter::from_fn(|| q.try_pop_due(now)).collect()
}

/// Awaits `fut`, failing instead of hanging when it is never woken (a lost wake-up). Under
/// paused time the day-long timeout passes at once when nothing else can run.
async fn bounded<F: Future>(fut: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(24 * 3600), fut)
        .await
        .expect("woken in time, not a lost wake-up")
}

/// Lets spawned tasks run until they are all idle, without moving the clock.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[test]
fn config_is_validated() {
    for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
        let err = WeightedQueue::<u32, ()>::new(QueueConfig::default().low_lane_share(bad));
        assert!(
            matches!(err, Err(QueueConfigError::LowLaneShare(_))),
            "{bad}"
        );
    }
    let err = WeightedQueue::<u32, ()>::new(
        QueueConfig::default().max_delay(super::MAX_DELAY_LIMIT + ms(1)),
    );
    let Err(err) = err else {
        panic!("max_delay above the limit was accepted");
    };
    assert!(err.to_string().contains("max_delay"), "{err}");
    for ok in [0.0, 0.2, 1.0] {
        assert!(WeightedQueue::<u32, ()>::new(QueueConfig::default().low_lane_share(ok)).is_ok());
    }
}

#[tokio::test(start_paused = true)]
async fn orders_by_weight_then_due_then_insertion() {
    let q = queue(0.0);
    let t0 = Instant::now();
    q.add_at(1, "low-late", 0, t0 + ms(5));
    q.add_at(2, "high-late", 5, t0 + ms(5));
    q.add_at(3, "high-early", 5, t0 + ms(1));
    q.add_at(4, "mid", 3, t0);
    q.add_at(5, "high-late-2", 5, t0 + ms(5));
    q.add_at(6, "low-early", 0, t0 + ms(2));
    let order: Vec<_> = drain(&q, t0 + ms(10)).into_iter().map(|(_, j)| j).collect();
    assert_eq!(
        order,
        [
            "high-early",
            "high-late",
            "high-late-2",
            "mid",
            "low-early",
            "low-late"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn promoted_job_keeps_its_due_time_in_the_lane() {
    let q = queue(0.0);
    q.add(1, "delayed, due first", 0, ms(10));
    advance(ms(20)).await;
    // Added later with no delay: due after the promoted one.
    q.add(2, "fresh", 0, Duration::ZERO);
    let order: Vec<_> = drain(&q, Instant::now())
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(order, [1, 2]);
}

#[tokio::test(start_paused = true)]
async fn delayed_job_is_not_popped_before_due() {
    let q = queue(0.2);
    q.add(1, (), FRESH, ms(100));
    assert_eq!(q.len_delayed(), 1);
    assert_eq!(q.try_pop_due(Instant::now()), None);
    advance(ms(99)).await;
    assert_eq!(q.try_pop_due(Instant::now()), None);
    assert_eq!(q.len_ready(), 0);
    advance(ms(1)).await;
    assert_eq!(q.try_pop_due(Instant::now()), Some((1, ())));
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn replace_delayed_with_delayed() {
    let q = queue(0.0);
    assert_eq!(q.add(1, "old", FRESH, ms(10)), None);
    assert_eq!(q.add(1, "new", FRESH, ms(30)), Some("old"));
    assert_eq!((q.len(), q.len_delayed()), (1, 1));
    advance(ms(10)).await;
    assert_eq!(
        q.try_pop_due(Instant::now()),
        None,
        "the old due time is gone"
    );
    advance(ms(20)).await;
    assert_eq!(q.try_pop_due(Instant::now()), Some((1, "new")));
    assert_eq!(q.try_pop_due(Instant::now()), None);
    assert_eq!(q.stats().replaced, 1);
}

#[tokio::test(start_paused = true)]
async fn replace_delayed_with_ready() {
    let q = queue(0.0);
    q.add(1, "old", FRESH, ms(10));
    assert_eq!(q.add(1, "new", FRESH, Duration::ZERO), Some("old"));
    assert_eq!((q.len_ready(), q.len_delayed()), (1, 0));
    assert_eq!(q.try_pop_due(Instant::now()), Some((1, "new")));
    advance(ms(10)).await;
    assert_eq!(q.try_pop_due(Instant::now()), None);
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn replace_ready_with_delayed() {
    let q = queue(0.0);
    q.add(1, "old", FRESH, Duration::ZERO);
    assert_eq!(q.add(1, "new", FRESH, ms(10)), Some("old"));
    assert_eq!((q.len_ready(), q.len_delayed()), (0, 1));
    assert_eq!(
        q.try_pop_due(Instant::now()),
        None,
        "stale ready job must not run"
    );
    advance(ms(10)).await;
    assert_eq!(q.try_pop_due(Instant::now()), Some((1, "new")));
}

#[tokio::test(start_paused = true)]
async fn replace_ready_with_ready_moves_to_the_back() {
    let q = queue(0.0);
    q.add(1, "old", FRESH, Duration::ZERO);
    q.add(2, "other", FRESH, Duration::ZERO);
    assert_eq!(q.add(1, "new", FRESH, Duration::ZERO), Some("old"));
    assert_eq!(q.len_ready(), 2);
    assert_eq!(drain(&q, Instant::now()), [(2, "other"), (1, "new")]);
}

#[tokio::test(start_paused = true)]
async fn replace_across_lanes() {
    let q = queue(0.0);
    q.add(1, "old", FRESH, Duration::ZERO);
    q.add(2, "retry", RETRY, Duration::ZERO);
    assert_eq!(q.add(1, "new", RETRY, Duration::ZERO), Some("old"));
    assert_eq!(
        q.lane(FRESH),
        LaneStats {
            weight: FRESH,
            ready: 0,
            delayed: 0
        }
    );
    assert_eq!(q.lane(RETRY).ready, 2);
    assert_eq!(q.stats().lanes.len(), 1, "the emptied lane is dropped");
    assert_eq!(drain(&q, Instant::now()), [(2, "retry"), (1, "new")]);

    // Delayed in one lane, replaced by a delayed job in another.
    q.add(3, "old", RETRY, ms(5));
    q.add(3, "new", FRESH, ms(5));
    assert_eq!(q.lane(RETRY).delayed, 0);
    assert_eq!(q.lane(FRESH).delayed, 1);
    advance(ms(5)).await;
    assert_eq!(q.try_pop_due(Instant::now()), Some((3, "new")));
}

#[tokio::test(start_paused = true)]
async fn cancel_in_every_position() {
    let q = queue(0.0);
    q.add(1, "delayed", FRESH, ms(10));
    q.add(2, "ready", FRESH, Duration::ZERO);
    q.add(3, "ready-retry", RETRY, Duration::ZERO);
    q.add(4, "stays", FRESH, ms(10));
    assert_eq!(q.cancel(&1), Some("delayed"));
    assert_eq!(q.cancel(&2), Some("ready"));
    assert_eq!(q.cancel(&3), Some("ready-retry"));
    assert_eq!(q.cancel(&3), None, "already gone");
    assert_eq!(q.cancel(&9), None, "never queued");
    assert!(!q.contains(&1) && q.contains(&4));
    assert_eq!((q.len(), q.len_ready(), q.len_delayed()), (1, 0, 1));
    // A job promoted to ready and then cancelled.
    advance(ms(10)).await;
    q.add(5, "promoted", FRESH, Duration::ZERO); // observes the clock: promotes 4
    assert_eq!(q.len_ready(), 2);
    assert_eq!(q.cancel(&4), Some("stays"));
    assert_eq!(drain(&q, Instant::now()), [(5, "promoted")]);
    let stats = q.stats();
    assert_eq!((stats.cancelled, stats.popped, stats.added), (4, 1, 5));
    assert!(stats.lanes.is_empty());
}

#[tokio::test(start_paused = true)]
async fn job_added_with_a_past_due_time_goes_first_in_its_lane() {
    let q = queue(0.0);
    let t0 = Instant::now();
    advance(ms(100)).await;
    q.add(1, "now", FRESH, Duration::ZERO);
    q.add(2, "now too", FRESH, Duration::ZERO);
    q.add_at(3, "long overdue", FRESH, t0);
    q.add_at(4, "overdue", FRESH, t0 + ms(50));
    assert_eq!(q.len_ready(), 4);
    assert_eq!(q.next_due(), Some(t0));
    q.add_at(3, "replaced", RETRY, t0);
    assert_eq!(q.cancel(&4), Some("overdue"));
    let order: Vec<_> = drain(&q, Instant::now())
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(order, [1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn stale_tickets_are_swept() {
    let q = queue(0.2);
    for round in 0..1_000 {
        // Ready and delayed jobs replaced over and over, and a churn of cancels.
        q.add(1, round, FRESH, Duration::ZERO);
        q.add(2, round, RETRY, ms(10));
        q.add(3, round, FRESH, Duration::ZERO);
        q.cancel(&3);
    }
    assert_eq!(q.len(), 2);
    let tickets = q.lock().tickets();
    assert!(tickets <= 16, "{tickets} tickets for 2 jobs");
    advance(ms(10)).await;
    assert_eq!(drain(&q, Instant::now()), [(1, 999), (2, 999)]);
    assert_eq!(q.lock().tickets(), 0);
}

#[tokio::test(start_paused = true)]
async fn stats_snapshot_counts_lanes() {
    let q = queue(0.2);
    q.add(1, (), 0, Duration::ZERO);
    q.add(2, (), 0, ms(5));
    q.add(3, (), 7, ms(5));
    q.add(4, (), 7, Duration::from_secs(400 * 24 * 3600));
    let stats = q.stats();
    assert_eq!(
        (stats.len, stats.ready, stats.delayed, stats.clamped),
        (4, 1, 3, 1)
    );
    assert_eq!(
        stats.lanes,
        [
            LaneStats {
                weight: 0,
                ready: 1,
                delayed: 1
            },
            LaneStats {
                weight: 7,
                ready: 0,
                delayed: 2
            },
        ]
    );
    assert_eq!(
        q.next_due(),
        Some(Instant::now()),
        "ready jobs count in next_due"
    );
}

#[tokio::test(start_paused = true)]
async fn far_future_delay_is_clamped() {
    let q: WeightedQueue<u32, ()> =
        WeightedQueue::new(QueueConfig::default().max_delay(Duration::from_secs(60)))
            .expect("valid config");
    q.add(1, (), 0, Duration::MAX);
    assert_eq!(q.next_due(), Some(Instant::now() + Duration::from_secs(60)));
    assert_eq!(q.stats().clamped, 1);
}

#[tokio::test(start_paused = true)]
async fn retries_get_their_share_under_a_flood() {
    let q = queue(0.2);
    for k in 0..10_000 {
        q.add(k, FRESH, FRESH, Duration::ZERO);
    }
    for k in 10_000..10_100 {
        q.add(k, RETRY, RETRY, Duration::ZERO);
    }
    let now = Instant::now();
    let lanes: Vec<u32> = (0..500)
        .map(|_| q.try_pop_due(now).map_or(u32::MAX, |(_, lane)| lane))
        .collect();
    assert_eq!(lanes.iter().filter(|&&l| l == RETRY).count(), 100);
    // Exactly every fifth pop.
    for (i, lane) in lanes.iter().enumerate() {
        assert_eq!(*lane == RETRY, (i + 1) % 5 == 0, "pop {i}");
    }
    assert_eq!(q.stats().low_lane_pops, 100);
}

#[tokio::test(start_paused = true)]
async fn retries_get_their_share_under_a_constant_flood() {
    // Fresh work keeps arriving: every pop is followed by a new fresh job.
    let q = queue(0.25);
    for k in 0..1_000 {
        q.add(k, FRESH, FRESH, Duration::ZERO);
    }
    for k in 100_000..100_050 {
        q.add(k, RETRY, RETRY, Duration::ZERO);
    }
    let mut retries = 0;
    for (n, next) in (1..=200).zip(1_000..) {
        let (_, lane) = q.try_pop_due(Instant::now()).expect("work is queued");
        retries += usize::from(lane == RETRY);
        assert!(retries >= n / 4, "pop {n}: only {retries} retries");
        q.add(next, FRESH, FRESH, Duration::ZERO);
    }
    assert_eq!(retries, 50);
    assert_eq!(q.lane(RETRY).ready, 0);
}

#[tokio::test(start_paused = true)]
async fn share_zero_is_strict_priority_and_one_favours_the_low_lane() {
    for (share, first) in [(0.0, FRESH), (1.0, RETRY)] {
        let q = queue(share);
        for k in 0..10 {
            q.add(k, (), FRESH, Duration::ZERO);
            q.add(100 + k, (), RETRY, Duration::ZERO);
        }
        let lanes: Vec<u32> = drain(&q, Instant::now())
            .into_iter()
            .map(|(k, ())| if k >= 100 { RETRY } else { FRESH })
            .collect();
        assert!(
            lanes[..10].iter().all(|&l| l == first),
            "{share}: {lanes:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn middle_lanes_wait_for_the_top_lane() {
    let q = queue(0.5);
    q.add(1, "top", 2, Duration::ZERO);
    q.add(2, "top", 2, Duration::ZERO);
    q.add(3, "mid", 1, Duration::ZERO);
    q.add(4, "low", 0, Duration::ZERO);
    let order: Vec<_> = drain(&q, Instant::now())
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    // Credit 0.5 → top; 1.0 → low; 0.5 → top (contended with mid); mid alone.
    assert_eq!(order, [1, 4, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn pop_waits_for_the_due_time() {
    let q = Arc::new(queue::<&str>(0.2));
    let start = Instant::now();
    q.add(1, "job", FRESH, ms(250));
    let popped = bounded(q.pop()).await;
    assert_eq!(popped, Some((1, "job")));
    assert_eq!(Instant::now() - start, ms(250));
}

#[tokio::test(start_paused = true)]
async fn waiting_pop_wakes_when_an_earlier_job_arrives() {
    let q = Arc::new(queue::<&str>(0.2));
    let start = Instant::now();
    q.add(1, "late", FRESH, Duration::from_secs(10));
    let waiter = spawn_pop(&q);
    settle().await;
    assert_eq!(q.lock().timer, Some(start + Duration::from_secs(10)));
    q.add(2, "early", FRESH, Duration::from_secs(1));
    settle().await;
    assert_eq!(
        q.lock().timer,
        Some(start + Duration::from_secs(1)),
        "re-armed"
    );
    let popped = bounded(waiter).await.expect("pop task");
    assert_eq!(popped, Some((2, "early")));
    assert_eq!(Instant::now() - start, Duration::from_secs(1));
    assert!(q.contains(&1));
}

#[tokio::test(start_paused = true)]
async fn waiting_pop_wakes_when_a_ready_job_arrives() {
    let q = Arc::new(queue::<&str>(0.2));
    let waiter = spawn_pop(&q);
    settle().await;
    assert!(!waiter.is_finished());
    q.add(1, "now", FRESH, Duration::ZERO);
    assert_eq!(bounded(waiter).await.expect("pop task"), Some((1, "now")));
}

#[tokio::test(start_paused = true)]
async fn replaced_job_wakes_nobody_early() {
    let q = Arc::new(queue::<&str>(0.2));
    let start = Instant::now();
    q.add(1, "old", FRESH, ms(10));
    let waiter = spawn_pop(&q);
    settle().await;
    q.add(1, "new", FRESH, ms(50));
    assert_eq!(bounded(waiter).await.expect("pop task"), Some((1, "new")));
    assert_eq!(Instant::now() - start, ms(50));
}

#[tokio::test(start_paused = true)]
async fn close_wakes_waiters() {
    let q = Arc::new(queue::<&str>(0.2));
    q.add(1, "delayed", FRESH, Duration::from_secs(60));
    let waiters: Vec<_> = (0..4).map(|_| spawn_pop(&q)).collect();
    settle().await;
    q.close();
    for waiter in waiters {
        assert_eq!(bounded(waiter).await.expect("pop task"), None);
    }
    assert_eq!(bounded(q.pop()).await, None, "future pops too");
    q.add(2, "after close", FRESH, Duration::ZERO);
    assert_eq!(q.try_pop_due(Instant::now()), None);
    assert!(q.is_closed() && q.stats().closed);
    assert_eq!(q.len(), 2, "queued jobs stay");
}

#[tokio::test(start_paused = true)]
async fn many_waiters_each_get_one_job() {
    let q = Arc::new(queue::<u32>(0.2));
    let waiters: Vec<_> = (0..8).map(|_| spawn_pop(&q)).collect();
    settle().await;
    // One timer for all of them.
    q.add(100, 100, FRESH, ms(10));
    settle().await;
    // All due at once: the timer holder wakes and chains the others.
    for k in 0..7 {
        q.add(k, k, FRESH, ms(10));
    }
    let mut keys = Vec::new();
    for waiter in waiters {
        let (key, _) = bounded(waiter).await.expect("pop task").expect("a job");
        keys.push(key);
    }
    keys.sort_unstable();
    assert_eq!(keys, [0, 1, 2, 3, 4, 5, 6, 100]);
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn dropped_timer_holder_hands_the_timer_over() {
    let q = Arc::new(queue::<&str>(0.2));
    q.add(1, "job", FRESH, ms(100));
    let holder = spawn_pop(&q);
    settle().await;
    let other = spawn_pop(&q);
    settle().await;
    assert!(q.lock().timer.is_some());
    holder.abort();
    assert!(holder.await.is_err_and(|e| e.is_cancelled()));
    settle().await;
    assert!(q.lock().timer.is_some(), "the other pop took the timer");
    assert_eq!(bounded(other).await.expect("pop task"), Some((1, "job")));
}

#[tokio::test(start_paused = true)]
async fn pop_is_cancel_safe_in_select() {
    let q = Arc::new(queue::<&str>(0.2));
    q.add(1, "job", FRESH, ms(100));
    tokio::select! {
        popped = q.pop() => panic!("popped {popped:?} before its due time"),
        () = tokio::time::sleep(ms(50)) => {}
    }
    assert!(q.contains(&1));
    assert_eq!(q.lock().timer, None, "the dropped pop released the timer");
    assert_eq!(q.lock().waiters, 0, "and its place among the waiters");
    assert_eq!(bounded(q.pop()).await, Some((1, "job")));
}

#[tokio::test(start_paused = true)]
async fn workers_drain_a_shared_queue() {
    let q = Arc::new(queue::<u32>(0.2));
    let workers: Vec<JoinHandle<Vec<u32>>> = (0..4)
        .map(|_| {
            let q = Arc::clone(&q);
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some((key, _)) = q.pop().await {
                    got.push(key);
                }
                got
            })
        })
        .collect();
    for k in 0..1_000u32 {
        q.add(k, k, k % 3, ms(u64::from(k % 17)));
    }
    while !q.is_empty() {
        tokio::time::sleep(ms(1)).await;
    }
    q.close();
    let mut all = Vec::new();
    for worker in workers {
        all.extend(bounded(worker).await.expect("worker"));
    }
    all.sort_unstable();
    assert_eq!(all, (0..1_000).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worker_threads_lose_no_wakeup() {
    const JOBS: u32 = 20_000;
    let q = Arc::new(queue::<u32>(0.2));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let workers: Vec<JoinHandle<()>> = (0..4)
        .map(|_| {
            let (q, tx) = (Arc::clone(&q), tx.clone());
            tokio::spawn(async move {
                while let Some((key, _)) = q.pop().await {
                    let _ = tx.send(key);
                }
            })
        })
        .collect();
    let producer = {
        let q = Arc::clone(&q);
        tokio::spawn(async move {
            for k in 0..JOBS {
                q.add(k, k, k % 2, Duration::ZERO);
                if k % 64 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    // A lost wake-up would hang; the timeout turns that into a failure.
    let received = tokio::time::timeout(Duration::from_secs(30), async {
        let mut seen = vec![false; JOBS as usize];
        for _ in 0..JOBS {
            let key = rx.recv().await.expect("workers alive");
            seen[key as usize] = true;
        }
        seen
    })
    .await
    .expect("all jobs popped in time");
    assert!(received.iter().all(|&s| s));
    producer.await.expect("producer");
    q.close();
    for worker in workers {
        worker.await.expect("worker");
    }
}

#[test]
fn queue_and_pop_future_are_send_and_sync() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let q = queue::<String>(0.2);
    send_sync(&q);
    send(&q.pop());
}

fn spawn_pop<J: Send + 'static>(q: &Arc<WeightedQueue<u32, J>>) -> JoinHandle<Option<(u32, J)>> {
    let q = Arc::clone(q);
    tokio::spawn(async move { q.pop().await })
}

mod model;
