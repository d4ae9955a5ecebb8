//! client-go's REST client metrics for kstage's kube-rs clients:
//! `rest_client_requests_total{code,method,host}` and
//! `rest_client_request_duration_seconds{verb,host}`, recorded by a layer in each
//! client's service stack (watches and lists included; a watch's duration is the time to
//! its response head, as client-go's). A request that failed before any answer counts
//! with code `<error>`, as client-go counts it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// The figures, shared by every client of a cluster.
#[derive(Debug, Clone)]
pub struct RestMetrics {
    requests: Family<Labels, Counter>,
    duration: Family<Labels, Histogram, fn() -> Histogram>,
}

impl Default for RestMetrics {
    fn default() -> Self {
        fn histogram() -> Histogram {
            // client-go's buckets: 1 ms to ~16 s.
            Histogram::new(exponential_buckets(0.001, 2.0, 15))
        }
        Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(histogram),
        }
    }
}

impl RestMetrics {
    /// Record one request.
    pub fn record(&self, method: &str, host: &str, code: Option<u16>, took: std::time::Duration) {
        let code = code.map_or_else(|| "<error>".to_owned(), |c| c.to_string());
        self.requests
            .get_or_create(&vec![
                ("code", code),
                ("method", method.to_owned()),
                ("host", host.to_owned()),
            ])
            .inc();
        self.duration
            .get_or_create(&vec![
                ("verb", method.to_owned()),
                ("host", host.to_owned()),
            ])
            .observe(took.as_secs_f64());
    }

    /// Add the two families to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "rest_client_requests",
            "Requests to the API server, by status code, method and host.",
            self.requests.clone(),
        );
        registry.register(
            "rest_client_request_duration_seconds",
            "Seconds from a request to its response head, by verb and host.",
            self.duration.clone(),
        );
    }

    /// The layer recording into these figures.
    pub fn layer(&self) -> RestLayer {
        RestLayer(Arc::new(self.clone()))
    }
}

/// A `tower` layer recording every request of a client.
#[derive(Debug, Clone)]
pub struct RestLayer(Arc<RestMetrics>);

impl<S> tower_layer::Layer<S> for RestLayer {
    type Service = RestService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RestService {
            inner,
            metrics: self.0.clone(),
        }
    }
}

/// The service of [`RestLayer`].
#[derive(Debug, Clone)]
pub struct RestService<S> {
    inner: S,
    metrics: Arc<RestMetrics>,
}

impl<S, B, R> tower_service::Service<http::Request<B>> for RestService<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = request.method().as_str().to_owned();
        let host = request
            .uri()
            .authority()
            .map_or_else(String::new, |a| a.to_string());
        let metrics = self.metrics.clone();
        let started = Instant::now();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            let code = answer.as_ref().ok().map(|r| r.status().as_u16());
            metrics.record(&method, &host, code, started.elapsed());
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_codes_and_errors_by_method_and_host() {
        let m = RestMetrics::default();
        m.record(
            "PATCH",
            "h:1",
            Some(200),
            std::time::Duration::from_millis(3),
        );
        m.record(
            "PATCH",
            "h:1",
            Some(200),
            std::time::Duration::from_millis(5),
        );
        m.record("GET", "h:1", None, std::time::Duration::from_millis(1));
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert!(
            text.contains(
                "rest_client_requests_total{code=\"200\",method=\"PATCH\",host=\"h:1\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "rest_client_requests_total{code=\"<error>\",method=\"GET\",host=\"h:1\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "rest_client_request_duration_seconds_count{verb=\"PATCH\",host=\"h:1\"} 2"
            ),
            "{text}"
        );
    }
}
