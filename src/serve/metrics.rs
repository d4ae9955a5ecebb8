//! `/metrics`: the engine's figures in the Prometheus text format or OpenMetrics,
//! encoded by the Prometheus project's client crate (`prometheus-client`). Collectors
//! read what the engine keeps anyway (atomics, per-job histograms, the queue's counts)
//! at scrape time; nothing is computed per object.
//!
//! Families (labels never name an object):
//! - client-go's `workqueue_*` with `name` = the lane (`fresh`, `retry`): depth (jobs
//!   due and waiting), adds, retries, queue duration (due → taken by a worker: the
//!   due-to-applied lag), work duration, unfinished work and longest-running worker;
//! - `kstage_*`: transitions by resource and Stage, step duration, retries by decision,
//!   dropped jobs by cause, skipped no-op patches, writes, events, stale jobs, slowed
//!   objects, objects held by resource, Stages compiled;
//! - client-go's `rest_client_requests_total` and `rest_client_request_duration_seconds`
//!   (see [`crate::cluster::rest_metrics`]);
//! - plugins ([`PluginCollector`]): `kstage_plugin_calls_total{plugin,capability,version,
//!   outcome}`, `kstage_plugin_call_duration_seconds`, swaps accepted and rejected,
//!   rollouts by result and in progress,
//!   fallbacks, failed decisions; node Leases held ([`LeaseCollector`]);
//! - `process_*`: CPU seconds, resident memory, open file descriptors (from `/proc`).

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::cluster::Cluster;
use crate::engine::metrics::LANES;
use crate::engine::{Engine, Metrics};
use crate::proc::{self, Process};

/// Encode a counter family: one sample per label set (nothing at all without samples,
/// as client_golang leaves out a vector with no children).
fn counters<L: prometheus_client::encoding::EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut samples = samples.into_iter().peekable();
    if samples.peek().is_none() {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in samples {
        ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Encode a gauge family.
fn gauges<L: prometheus_client::encoding::EncodeLabelSet, V>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, V)>,
) -> Result<(), std::fmt::Error>
where
    ConstGauge<V>: prometheus_client::encoding::EncodeMetric,
{
    let mut samples = samples.into_iter().peekable();
    if samples.peek().is_none() {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in samples {
        ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Encode a histogram family.
fn histograms<'h, L: prometheus_client::encoding::EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, &'h Histogram)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, histogram) in samples {
        histogram.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

type Labels = Vec<(&'static str, String)>;

fn lane(name: &str) -> Labels {
    vec![("name", name.to_owned())]
}

/// The engine's figures.
pub struct EngineCollector<C: Cluster> {
    engine: Arc<Engine<C>>,
}

impl<C: Cluster> std::fmt::Debug for EngineCollector<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineCollector").finish_non_exhaustive()
    }
}

impl<C: Cluster> EngineCollector<C> {
    /// Collect `engine`'s figures.
    pub fn new(engine: Arc<Engine<C>>) -> Self {
        Self { engine }
    }
}

impl<C: Cluster + 'static> Collector for EngineCollector<C> {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let e = &mut encoder;
        let engine = &self.engine;
        let m = engine.metrics();
        let queue = engine.queue();
        gauges(
            e,
            "workqueue_depth",
            "Jobs due and waiting for a worker, by lane.",
            LANES.map(|(n, name)| (lane(name), queue.lane(n).ready as i64)),
        )?;
        counters(
            e,
            "workqueue_adds",
            "Jobs queued, by lane (a job replacing the object's queued one included).",
            LANES.map(|(n, name)| (lane(name), Metrics::get(&m.lane(n).adds))),
        )?;
        counters(
            e,
            "workqueue_retries",
            "Failed steps queued again to retry.",
            LANES.map(|(n, name)| {
                let retries = if n == crate::engine::RETRY_LANE {
                    Metrics::get(&m.requeued)
                } else {
                    0
                };
                (lane(name), retries)
            }),
        )?;
        histograms(
            e,
            "workqueue_queue_duration_seconds",
            "Seconds from a job being due to a worker taking it (the due-to-applied lag).",
            LANES.map(|(n, name)| (lane(name), &m.lane(n).queue_duration)),
        )?;
        histograms(
            e,
            "workqueue_work_duration_seconds",
            "Seconds a worker played a job.",
            LANES.map(|(n, name)| (lane(name), &m.lane(n).work_duration)),
        )?;
        gauges(
            e,
            "workqueue_unfinished_work_seconds",
            "Seconds of work begun and not finished, summed over the workers.",
            LANES.map(|(n, name)| (lane(name), m.unfinished(n).total)),
        )?;
        gauges(
            e,
            "workqueue_longest_running_processor_seconds",
            "Seconds the longest-running worker has been playing its job.",
            LANES.map(|(n, name)| (lane(name), m.unfinished(n).longest)),
        )?;
        counters(
            e,
            "kstage_transitions",
            "Stages played to their end, by resource and Stage.",
            m.transitions_by_resource()
                .into_iter()
                .map(|((api_version, kind, stage), n)| {
                    let labels: Labels = vec![
                        ("api_version", api_version),
                        ("kind", kind),
                        ("stage", stage),
                    ];
                    (labels, n)
                }),
        )?;
        histograms(
            e,
            "kstage_step_duration_seconds",
            "Seconds one step of a Stage took (rendered and sent).",
            [(Labels::new(), &m.step_duration)],
        )?;
        counters(
            e,
            "kstage_retries",
            "Failed steps by the decision taken (backoff, retry-after, refresh, drop ...).",
            m.retries_with_zeros()
                .into_iter()
                .map(|(decision, n)| (vec![("decision", decision)], n)),
        )?;
        counters(
            e,
            "kstage_dropped_jobs",
            "Jobs given up, by cause.",
            m.dropped_with_zeros()
                .into_iter()
                .map(|(cause, n)| (vec![("cause", cause)], n)),
        )?;
        counters(
            e,
            "kstage_stage_status",
            "Stage resource statuses looked at, by result: written, unchanged (no write: it said the same), conflict (the Stage changed meanwhile), failed.",
            m.stage_statuses()
                .into_iter()
                .map(|(result, n)| (vec![("result", result)], n)),
        )?;
        counters(
            e,
            "kstage_stage_plugin_status",
            "StagePlugin resource statuses looked at, by result: written, unchanged (no write: it said the same), conflict (the StagePlugin changed meanwhile), failed.",
            m.plugin_statuses()
                .into_iter()
                .map(|(result, n)| (vec![("result", result)], n)),
        )?;
        let plain: [(&str, &str, &std::sync::atomic::AtomicU64); 5] = [
            (
                "kstage_noop_patches_skipped",
                "Patches not sent because they would change nothing.",
                &m.noops,
            ),
            (
                "kstage_writes",
                "Writes (patch, apply, delete) that succeeded.",
                &m.writes,
            ),
            ("kstage_events", "Events Stages emitted.", &m.events),
            (
                "kstage_stale_jobs",
                "Jobs skipped because the object changed or went away meanwhile.",
                &m.stale,
            ),
            (
                "kstage_slowed_objects",
                "Objects slowed down by the loop guard for replaying a Stage.",
                &m.slowed,
            ),
        ];
        for (name, help, counter) in plain {
            counters(e, name, help, [(Labels::new(), Metrics::get(counter))])?;
        }
        gauges(
            e,
            "kstage_objects_held",
            "Objects the engine holds (their newest version), by resource.",
            engine.held().into_iter().map(|(r, n)| {
                let labels: Labels = vec![("api_version", r.api_group), ("kind", r.kind)];
                (labels, n as i64)
            }),
        )?;
        gauges(
            e,
            "kstage_stages",
            "Stages in play, by state.",
            [
                (
                    vec![("state", "compiled".to_owned())],
                    engine.stages().stages().len() as i64,
                ),
                (
                    vec![("state", "invalid".to_owned())],
                    Metrics::get(&m.invalid_stages) as i64,
                ),
            ],
        )?;
        Ok(())
    }
}

/// The process's own figures, read from `/proc/self` (absent where there is none).
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let e = &mut encoder;
        if let Some(cpu) = proc::process_cpu(Process::Current) {
            let mut family = e.encode_descriptor(
                "process_cpu_seconds",
                "User and system CPU seconds this process used.",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(cpu.as_secs_f64()).encode(family.encode_family(&Labels::new())?)?;
        }
        if let Some(rss) = proc::rss_bytes(Process::Current) {
            gauges(
                e,
                "process_resident_memory_bytes",
                "Resident memory of this process.",
                [(Labels::new(), rss as i64)],
            )?;
        }
        if let Some(fds) = proc::open_fds(Process::Current) {
            gauges(
                e,
                "process_open_fds",
                "Open file descriptors of this process.",
                [(Labels::new(), fds as i64)],
            )?;
        }
        Ok(())
    }
}

/// A registry with `engine`'s and the process's collectors, and the REST client's
/// figures when there are some.
pub fn registry<C: Cluster + 'static>(
    engine: Arc<Engine<C>>,
    rest: Option<&crate::cluster::rest_metrics::RestMetrics>,
) -> Registry {
    let mut registry = Registry::default();
    if let Some(rest) = rest {
        rest.register(&mut registry);
    }
    registry.register_collector(Box::new(EngineCollector::new(engine)));
    registry.register_collector(Box::new(ProcessCollector));
    registry
}

/// The registry as text: OpenMetrics when `openmetrics`, else Prometheus' 0.0.4 format.
/// Returns the body and its content type.
pub fn encode(registry: &Registry, openmetrics: bool) -> (String, &'static str) {
    let mut body = String::new();
    // Writing to a String cannot fail.
    if openmetrics {
        let _ = prometheus_client::encoding::text::encode(&mut body, registry);
        (
            body,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )
    } else {
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut body, registry);
        (
            body,
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        )
    }
}

/// The plugins' figures: calls by plugin, capability, version and outcome, their latency,
/// and the set's swaps, rejections, fallbacks and failed decisions.
#[derive(Debug)]
pub struct PluginCollector(pub Arc<crate::plugin::PluginSet>);

impl Collector for PluginCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use crate::plugin::Capability;
        use std::sync::atomic::Ordering::Relaxed;
        let e = &mut encoder;
        let plugins = self.0.plugins();
        let served: Vec<(&crate::plugin::Plugin, Capability)> = plugins
            .iter()
            .flat_map(|p| {
                Capability::DECISIONS
                    .into_iter()
                    .filter(|c| p.has(*c))
                    .map(move |c| (&**p, c))
            })
            .collect();
        let labels = |p: &crate::plugin::Plugin, c: Capability| -> Labels {
            vec![
                ("plugin", p.name().to_owned()),
                ("capability", c.as_str().to_owned()),
                ("version", p.info().version.clone()),
            ]
        };
        counters(
            e,
            "kstage_plugin_calls",
            "Plugin calls by plugin, capability, version and outcome.",
            served.iter().flat_map(|(p, c)| {
                let stats = p.stats(*c);
                let failed = stats.failures.load(Relaxed);
                let ok = stats.calls.load(Relaxed).saturating_sub(failed);
                let with = |outcome: &str| {
                    let mut l = labels(p, *c);
                    l.push(("outcome", outcome.to_owned()));
                    l
                };
                [(with("ok"), ok), (with("error"), failed)]
            }),
        )?;
        histograms(
            e,
            "kstage_plugin_call_duration_seconds",
            "Seconds per plugin call (buckets from 1 µs to 100 ms).",
            served
                .iter()
                .map(|(p, c)| (labels(p, *c), &p.stats(*c).latency)),
        )?;
        let m = self.0.metrics();
        counters(
            e,
            "kstage_plugin_swaps",
            "New plugin versions, by result: accepted (now serving) or rejected (the old one kept).",
            [
                (
                    vec![("result", "accepted".to_owned())],
                    m.swaps.load(Relaxed),
                ),
                (
                    vec![("result", "rejected".to_owned())],
                    m.rejections.load(Relaxed),
                ),
            ],
        )?;
        counters(
            e,
            "kstage_plugin_rollouts",
            "New plugin versions analysed beside the serving one (spec.rollout), by result: started, promoted, rolled_back, or superseded by a newer version before a verdict.",
            [
                ("started", &m.canaries),
                ("promoted", &m.promoted),
                ("rolled_back", &m.rolled_back),
                ("superseded", &m.superseded),
            ]
            .map(|(result, n)| (vec![("result", result.to_owned())], n.load(Relaxed))),
        )?;
        gauges(
            e,
            "kstage_plugin_rollouts_in_progress",
            "Plugin versions under analysis now (or decided, waiting for the verdict to be recorded).",
            [(Labels::new(), self.0.rollouts().len() as i64)],
        )?;
        counters(
            e,
            "kstage_plugin_fallbacks",
            "Failed plugin calls answered by the built-in behaviour (failurePolicy fallback).",
            [(Labels::new(), m.fallbacks.load(Relaxed))],
        )?;
        counters(
            e,
            "kstage_plugin_failures",
            "Failed plugin calls that failed their decision (failurePolicy fail).",
            [(Labels::new(), m.failures.load(Relaxed))],
        )?;
        Ok(())
    }
}

/// The node Leases this replica holds (`--node-leases`).
#[derive(Debug)]
pub struct LeaseCollector(pub crate::lease::HeldNodes);

impl Collector for LeaseCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let held = self.0.borrow().len();
        gauges(
            &mut encoder,
            "kstage_node_leases_held",
            "Node Leases this replica holds.",
            [(Labels::new(), held as i64)],
        )
    }
}
