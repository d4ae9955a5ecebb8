//! A client-side request rate limit (`--qps`, `--burst`): a token bucket, async, fair in
//! arrival order. Unlimited by default, as KWOK.

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

/// A token bucket: `burst` requests at once, then `qps` per second.
#[derive(Debug)]
pub struct Throttle {
    qps: f64,
    burst: f64,
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Throttle {
    /// A limit of `qps` requests per second with bursts of `burst` (at least 1); `None`
    /// when `qps` is not positive (no limit).
    pub fn new(qps: f64, burst: u32) -> Option<Self> {
        if qps <= 0.0 || !qps.is_finite() {
            return None;
        }
        let burst = f64::from(burst.max(1));
        Some(Self {
            qps,
            burst,
            state: Mutex::new(Bucket {
                tokens: burst,
                at: Instant::now(),
            }),
        })
    }

    /// Wait for a token. Waiters are served in arrival order (the lock is fair).
    pub async fn acquire(&self) {
        let mut bucket = self.state.lock().await;
        let now = Instant::now();
        let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * self.qps;
        bucket.tokens = (bucket.tokens + refill).min(self.burst);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            let wait = Duration::from_secs_f64((1.0 - bucket.tokens) / self.qps);
            tokio::time::sleep(wait).await;
            bucket.tokens = 1.0;
            bucket.at = Instant::now();
        }
        bucket.tokens -= 1.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn bursts_then_paces() {
        let t = Throttle::new(10.0, 3).expect("limited");
        let start = Instant::now();
        for _ in 0..3 {
            t.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst goes at once");
        for _ in 0..10 {
            t.acquire().await;
        }
        let paced = start.elapsed().as_secs_f64();
        assert!(
            (paced - 1.0).abs() < 0.01,
            "10 more at 10/s take 1 s, took {paced}"
        );
        assert!(Throttle::new(0.0, 5).is_none(), "no qps, no limit");
    }
}
