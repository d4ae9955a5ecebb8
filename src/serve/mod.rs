//! The serving endpoint of `kstage run` and `kstage up` (`--serve ADDR`): `/livez` and
//! `/healthz` (the process and the engine loop are alive), `/readyz` (every watched
//! resource listed, Stages compiled, plugins loaded; failing at once on shutdown) and
//! `/metrics` (Prometheus text, or OpenMetrics when the scraper's `Accept` asks for it).
//!
//! Plain HTTP/1.1 on its own listener, apart from the engine's work: a probe or a scrape
//! never waits behind a job, and a wedged engine shows as a failing check, not as a
//! server that does not answer.

pub mod health;
pub mod metrics;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::cluster::Cluster;
use crate::engine::Engine;
pub use health::Check;

/// How long the runtime's heartbeat may be late before `/livez` fails.
pub const HEARTBEAT_LIMIT: Duration = Duration::from_secs(10);
/// How long jobs may wait with no worker taking one before `/livez` fails.
pub const WEDGED_LIMIT: Duration = Duration::from_secs(60);

/// What the endpoint answers from.
#[derive(Debug)]
pub struct Probes {
    live: Vec<Arc<Check>>,
    ready: Vec<Arc<Check>>,
    registry: Registry,
    shutting_down: Arc<AtomicBool>,
}

impl Probes {
    /// The probes of a running engine: liveness from the runtime's heartbeat (ticked by a
    /// task this starts) and the workers taking due jobs; readiness from the initial
    /// lists and `ready` (plugins loaded, anything else the caller knows of); metrics
    /// from the engine and the process.
    pub fn for_engine<C: Cluster + 'static>(
        engine: Arc<Engine<C>>,
        ready: Vec<Check>,
        rest: Option<&crate::cluster::rest_metrics::RestMetrics>,
    ) -> Self {
        let shutting_down = Arc::new(AtomicBool::new(false));
        let beat = Arc::new(AtomicU64::new(0));
        let base = std::time::Instant::now();
        {
            let beat = beat.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    beat.store(base.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
            });
        }
        let heartbeat = Check::new("runtime", move || {
            let late = base
                .elapsed()
                .saturating_sub(Duration::from_millis(beat.load(Ordering::Relaxed)));
            if late > HEARTBEAT_LIMIT {
                Err(format!("the runtime's heartbeat is {late:?} late"))
            } else {
                Ok(())
            }
        });
        let workers = {
            let engine = engine.clone();
            Check::new("workers", move || {
                let waiting = engine.queue().len_ready();
                let idle = engine.metrics().since_last_pop();
                if waiting > 0 && idle > WEDGED_LIMIT {
                    Err(format!(
                        "{waiting} jobs due and no worker took one for {idle:?}"
                    ))
                } else {
                    Ok(())
                }
            })
        };
        let synced = {
            let engine = engine.clone();
            Check::new("informer-sync", move || {
                let left = engine.unsynced();
                if left.is_empty() {
                    Ok(())
                } else {
                    let names: Vec<String> = left
                        .iter()
                        .map(|r| format!("{}/{}", r.api_group, r.kind))
                        .collect();
                    Err(format!(
                        "initial list not handled yet: {}",
                        names.join(", ")
                    ))
                }
            })
        };
        let shutdown = {
            let flag = shutting_down.clone();
            Check::new("shutdown", move || {
                if flag.load(Ordering::Acquire) {
                    Err("shutting down".into())
                } else {
                    Ok(())
                }
            })
        };
        let ping = Arc::new(Check::new("ping", || Ok(())));
        let heartbeat = Arc::new(heartbeat);
        let workers = Arc::new(workers);
        let mut all_ready = vec![
            ping.clone(),
            heartbeat.clone(),
            Arc::new(synced),
            Arc::new(shutdown),
        ];
        all_ready.extend(ready.into_iter().map(Arc::new));
        Self {
            live: vec![ping, heartbeat, workers],
            ready: all_ready,
            registry: metrics::registry(engine, rest),
            shutting_down,
        }
    }

    /// Add `collector`'s figures to `/metrics`.
    #[must_use]
    pub fn with_collector(
        mut self,
        collector: Box<dyn prometheus_client::collector::Collector>,
    ) -> Self {
        self.registry.register_collector(collector);
        self
    }

    /// From now on `/readyz` fails (the process is shutting down).
    pub fn shutting_down(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }

    /// Answer one request.
    pub fn answer(
        &self,
        method: &Method,
        path: &str,
        query: &str,
        accept: &str,
    ) -> Response<Full<Bytes>> {
        if method != Method::GET && method != Method::HEAD {
            return text(
                StatusCode::METHOD_NOT_ALLOWED,
                "only GET\n".into(),
                "text/plain; charset=utf-8",
            );
        }
        let params: Vec<(&str, &str)> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
            .collect();
        let verbose = params.iter().any(|(k, _)| *k == "verbose");
        let exclude: Vec<String> = params
            .iter()
            .filter(|(k, _)| *k == "exclude")
            .map(|(_, v)| (*v).to_owned())
            .collect();
        let probe = |name: &str, checks: &[Arc<Check>]| {
            let report = health::run(name, checks, verbose, &exclude);
            let status = if report.passed {
                StatusCode::OK
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            };
            text(status, report.body, "text/plain; charset=utf-8")
        };
        match path {
            "/livez" => probe("livez", &self.live),
            "/healthz" => probe("healthz", &self.live),
            "/readyz" => probe("readyz", &self.ready),
            "/metrics" => {
                let (body, content_type) = metrics::encode(
                    &self.registry,
                    accept.contains("application/openmetrics-text"),
                );
                text(StatusCode::OK, body, content_type)
            }
            _ => text(
                StatusCode::NOT_FOUND,
                "not found: try /livez, /readyz, /healthz or /metrics\n".into(),
                "text/plain; charset=utf-8",
            ),
        }
    }
}

fn text(status: StatusCode, body: String, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    response
}

/// A serving endpoint: where it listens and its task.
#[derive(Debug)]
pub struct Endpoint {
    /// The address it listens on (the port chosen when 0 was asked).
    pub addr: SocketAddr,
    /// The accept loop.
    pub task: JoinHandle<()>,
}

/// Serve `probes` on `addr`.
///
/// # Errors
/// When the address cannot be bound.
pub async fn start(addr: SocketAddr, probes: Arc<Probes>) -> std::io::Result<Endpoint> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!("serving endpoint: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let probes = probes.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let accept = req
                        .headers()
                        .get(header::ACCEPT)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned();
                    let response = probes.answer(
                        req.method(),
                        req.uri().path(),
                        req.uri().query().unwrap_or(""),
                        &accept,
                    );
                    async move { Ok::<_, Infallible>(response) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(10))
                    .serve_connection(TokioIo::new(stream), service);
                if let Err(e) = conn.await {
                    tracing::debug!("serving endpoint: connection ended: {e}");
                }
            });
        }
    });
    Ok(Endpoint { addr, task })
}

/// `--serve`: an address, or `off` (`None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeAddr(pub Option<SocketAddr>);

/// Parse `--serve`: an address, or `off`.
///
/// # Errors
/// When it is neither.
pub fn parse_serve(s: &str) -> Result<ServeAddr, String> {
    if s == "off" {
        return Ok(ServeAddr(None));
    }
    s.parse()
        .map(|a| ServeAddr(Some(a)))
        .map_err(|e| format!("{s:?} is not an address (HOST:PORT, e.g. 0.0.0.0:8080) or off: {e}"))
}
