//! `kstage bench --scrape INTERVAL`: the in-process engine's `/metrics` served on a
//! loopback port and fetched every `INTERVAL`, as Prometheus would, while the lifecycle
//! runs. What scraping costs is the difference between runs with and without it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::task::JoinHandle;

use crate::cluster::client::KubeCluster;
use crate::engine::Engine;

/// What the scrapes took.
#[derive(Debug, Default)]
pub struct Scrapes {
    took: Mutex<Vec<Duration>>,
    bytes: AtomicU64,
    failed: AtomicU64,
}

impl Scrapes {
    /// `N scrapes of /metrics every I (median T ms, B KiB each)`.
    pub fn summary(&self, every: Duration) -> String {
        let mut took = self.took.lock().map(|t| t.clone()).unwrap_or_default();
        took.sort();
        let n = took.len() as u64;
        let median = took.get(took.len() / 2).copied().unwrap_or_default();
        let failed = self.failed.load(Ordering::Relaxed);
        format!(
            "{n} scrapes of /metrics every {:.1} s (median {:.2} ms, {:.0} KiB each){}",
            every.as_secs_f64(),
            median.as_secs_f64() * 1e3,
            self.bytes.load(Ordering::Relaxed) as f64 / n.max(1) as f64 / 1024.0,
            if failed > 0 {
                format!(", {failed} failed")
            } else {
                String::new()
            },
        )
    }
}

/// Serve `engine`'s probes and metrics on a loopback port and fetch `/metrics` every
/// `every` into `scrapes`, until this future is dropped (the endpoint with it).
pub async fn run(engine: Arc<Engine<KubeCluster>>, every: Duration, scrapes: Arc<Scrapes>) {
    let rest = engine.cluster().rest_metrics().clone();
    let probes = crate::serve::Probes::for_engine(engine, Vec::new(), Some(&rest));
    let endpoint = match crate::serve::start(([127, 0, 0, 1], 0).into(), Arc::new(probes)).await {
        Ok(endpoint) => endpoint,
        Err(e) => {
            tracing::warn!("cannot serve the metrics to scrape: {e}");
            return;
        }
    };
    /// Stops the endpoint with the scraping.
    struct Abort(JoinHandle<()>);
    impl Drop for Abort {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let _serving = Abort(endpoint.task);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let started = Instant::now();
        match scrape(endpoint.addr).await {
            Ok(bytes) => {
                scrapes.bytes.fetch_add(bytes, Ordering::Relaxed);
                if let Ok(mut took) = scrapes.took.lock() {
                    took.push(started.elapsed());
                }
            }
            Err(_) => {
                scrapes.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// One `GET /metrics` on a new connection, as a scraper does; the body's size.
async fn scrape(addr: SocketAddr) -> std::io::Result<u64> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: kstage\r\nAccept: text/plain\r\nConnection: close\r\n\r\n")
        .await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    if !head.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(
            head.lines().next().unwrap_or("").to_owned(),
        ));
    }
    Ok(body.len() as u64)
}
