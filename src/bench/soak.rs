//! `kstage bench --soak DURATION`: churn for a long time and watch the engine's process
//! for growth. The lifecycle runs again and again (nodes and pods created, played to
//! Ready and Running, deleted) while a sampler reads the process every interval: resident
//! memory, open file descriptors, the engine's queue depth and its transitions per
//! second.
//!
//! Growth is judged after a warm-up (the first fifth of the samples): the median of the
//! last fifth against the median of the second fifth, so that where in a round a sample
//! falls (pods held, or just deleted) does not decide it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::Client;

use super::{Lifecycle, LifecycleFailure, lifecycle};
use crate::cluster::client::KubeCluster;
use crate::engine::Engine;
use crate::proc::{Process, open_fds, rss_bytes};

/// One reading of the engine's process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Since the soak began.
    pub at: Duration,
    /// Resident memory, bytes.
    pub rss: u64,
    /// Open file descriptors.
    pub fds: usize,
    /// Jobs in the engine's queue (due and delayed).
    pub queued: usize,
    /// Stages played per second since the previous sample.
    pub transitions_per_second: f64,
}

impl std::fmt::Display for Sample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "t={:>6.0}s rss={:.1}MB fds={} queued={} transitions/s={:.0}",
            self.at.as_secs_f64(),
            self.rss as f64 / 1e6,
            self.fds,
            self.queued,
            self.transitions_per_second
        )
    }
}

/// What a soak saw.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakReport {
    /// Every sample, in order.
    pub samples: Vec<Sample>,
    /// Lifecycle rounds completed.
    pub rounds: usize,
    /// Growth after the warm-up, as a fraction (0.05 = 5%); `None` with fewer than 5
    /// samples.
    pub rss_growth: Option<f64>,
    /// The same for open file descriptors.
    pub fds_growth: Option<f64>,
}

/// The growth of `values` after the warm-up: median of the last fifth over the median of
/// the second fifth, less one.
pub fn growth(values: &[f64]) -> Option<f64> {
    let fifth = values.len() / 5;
    if fifth == 0 {
        return None;
    }
    let median = |slice: &[f64]| {
        let mut v = slice.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let base = median(&values[fifth..2 * fifth]);
    let last = median(&values[values.len() - fifth..]);
    (base > 0.0).then(|| last / base - 1.0)
}

/// Run `spec`'s lifecycle again and again for `duration` against the engine already
/// playing in this process, sampling every `every` (each sample also handed to
/// `progress`).
///
/// # Errors
/// The round that failed, with what it had measured.
pub async fn soak(
    client: Client,
    spec: &Lifecycle,
    engine: Arc<Engine<KubeCluster>>,
    duration: Duration,
    every: Duration,
    progress: impl Fn(&Sample) + Send + Sync + 'static,
) -> Result<SoakReport, LifecycleFailure> {
    let started = Instant::now();
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampler = tokio::spawn({
        let samples = samples.clone();
        let engine = engine.clone();
        async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last = (Instant::now(), engine.metrics().transitions_total());
            loop {
                tick.tick().await;
                let now = (Instant::now(), engine.metrics().transitions_total());
                let seconds = now.0.duration_since(last.0).as_secs_f64().max(1e-9);
                let sample = Sample {
                    at: started.elapsed(),
                    rss: rss_bytes(Process::Current).unwrap_or(0),
                    fds: open_fds(Process::Current).unwrap_or(0),
                    queued: engine.queue().len(),
                    transitions_per_second: now.1.saturating_sub(last.1) as f64 / seconds,
                };
                last = now;
                progress(&sample);
                samples
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(sample);
            }
        }
    });
    let mut rounds = 0;
    let result = loop {
        if started.elapsed() >= duration {
            break Ok(());
        }
        if let Err(e) = lifecycle(client.clone(), spec, || {}, |_| {}).await {
            break Err(e);
        }
        rounds += 1;
    };
    sampler.abort();
    // Ended before the verdict is printed (an abort lands at the task's next await).
    let _ = sampler.await;
    result?;
    let samples = samples
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let series = |f: fn(&Sample) -> f64| -> Vec<f64> { samples.iter().map(f).collect() };
    Ok(SoakReport {
        rss_growth: growth(&series(|s| s.rss as f64)),
        fds_growth: growth(&series(|s| s.fds as f64)),
        samples,
        rounds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_judged_after_the_warm_up_on_medians() {
        // A warm-up climb, then flat with noise: no growth.
        let flat = [
            10.0, 50.0, 100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 100.0, 101.0,
        ];
        let g = growth(&flat).expect("enough samples");
        assert!(g.abs() < 0.02, "{g}");
        // A steady climb after the warm-up: growth.
        let leak: Vec<f64> = (0..10).map(|i| 100.0 + 10.0 * f64::from(i)).collect();
        let g = growth(&leak).expect("enough samples");
        assert!(g > 0.4, "{g}");
        assert_eq!(growth(&[1.0, 2.0, 3.0]), None, "too few samples");
    }
}
