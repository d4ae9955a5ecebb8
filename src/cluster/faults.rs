//! Fault injection for the in-memory cluster: failures by verb, at a rate or scripted.
//!
//! Used by the in-memory cluster of `sim` and by the embedded API server.
//!
//! A spec is a comma-separated list of `VERB[/RESOURCE]:FAULT=RATE` rules, e.g.
//! `patch:409=0.1,*:reset=0.05,create/pods:429@2s=0.2,watch:close=0.5`:
//! - `VERB`: `get`, `list`, `watch`, `create`, `update`, `patch`, `apply`, `delete`,
//!   `event`, or `*` for all;
//! - `RESOURCE`: a resource's plural name (`pods`, `nodes`, `stages` ...), or `*` (the
//!   default) for all;
//! - `FAULT`: `refused`, `reset`, `eof`, `timeout`, an HTTP status (`409`, `500`, `503`
//!   ...), `429@DURATION` for Too Many Requests with a `Retry-After`, or `close` (watch
//!   only: the watch is ended early, after a short random time);
//! - `RATE`: the probability in `[0, 1]` that a request of that verb fails so.
//!
//! Rules are tried in order; the first that fires decides. A failed request has no effect.
//! [`Faults::script`] queues exact failures for the next requests of a verb, for tests.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use crate::rng::Rng;

/// The API verbs faults can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// GET one object.
    Get,
    /// POST a new object.
    Create,
    /// PATCH an object.
    Patch,
    /// Server-side apply.
    Apply,
    /// DELETE an object.
    Delete,
    /// Record an event.
    Event,
    /// List a collection.
    List,
    /// Watch a collection.
    Watch,
    /// PUT an object.
    Update,
}

impl Verb {
    /// All verbs.
    pub const ALL: [Verb; 9] = [
        Verb::Get,
        Verb::Create,
        Verb::Patch,
        Verb::Apply,
        Verb::Delete,
        Verb::Event,
        Verb::List,
        Verb::Watch,
        Verb::Update,
    ];

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Create => "create",
            Verb::Patch => "patch",
            Verb::Apply => "apply",
            Verb::Delete => "delete",
            Verb::Event => "event",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Update => "update",
        }
    }
}

/// One injected failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// Connection refused.
    Refused,
    /// Connection reset.
    Reset,
    /// The connection closed before a response.
    Eof,
    /// No response in time.
    Timeout,
    /// An HTTP error status (with `Retry-After` for 429 when set).
    Status {
        /// The status code.
        code: u16,
        /// `Retry-After`, if any.
        retry_after: Option<Duration>,
    },
    /// A watch ended early by the server.
    Close,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Refused => f.write_str("refused"),
            Fault::Reset => f.write_str("reset"),
            Fault::Eof => f.write_str("eof"),
            Fault::Timeout => f.write_str("timeout"),
            Fault::Close => f.write_str("close"),
            Fault::Status {
                code,
                retry_after: Some(d),
            } => write!(f, "{code}@{}ms", d.as_millis()),
            Fault::Status { code, .. } => write!(f, "{code}"),
        }
    }
}

/// A problem in a fault spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid fault rule {rule:?}: {cause}")]
pub struct FaultSpecError {
    /// The rule.
    pub rule: String,
    /// What is wrong.
    pub cause: String,
}

#[derive(Debug, Clone, PartialEq)]
struct Rule {
    verb: Option<Verb>,
    /// A resource's plural name; `None` for all.
    resource: Option<String>,
    fault: Fault,
    rate: f64,
}

impl Rule {
    fn applies(&self, verb: Verb, resource: &str) -> bool {
        self.verb.is_none_or(|v| v == verb)
            && self.resource.as_deref().is_none_or(|r| r == resource)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.verb.map_or("*", Verb::as_str))?;
        if let Some(resource) = &self.resource {
            write!(f, "/{resource}")?;
        }
        write!(f, ":{}={}", self.fault, self.rate)
    }
}

/// A parsed fault spec.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultSpec {
    rules: Vec<Rule>,
}

impl FaultSpec {
    /// No faults.
    pub fn none() -> Self {
        Self::default()
    }

    /// Every verb fails at `rate`, spread evenly over the transient faults (resets,
    /// timeouts, 429 with a 1 s Retry-After, 500, 503).
    pub fn transient(rate: f64) -> Self {
        let faults = [
            Fault::Reset,
            Fault::Timeout,
            Fault::Status {
                code: 429,
                retry_after: Some(Duration::from_secs(1)),
            },
            Fault::Status {
                code: 500,
                retry_after: None,
            },
            Fault::Status {
                code: 503,
                retry_after: None,
            },
        ];
        // Rules fire in order, so each one's conditional rate is scaled to give every
        // fault an equal share of `rate`.
        let mut rules = Vec::new();
        let mut remaining = 1.0;
        for fault in faults {
            let share = rate / faults.len() as f64;
            rules.push(Rule {
                verb: None,
                resource: None,
                fault,
                rate: (share / remaining).min(1.0),
            });
            remaining -= share;
        }
        Self { rules }
    }

    /// Whether no rule is set.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// The spec in the syntax it is parsed from (rates as given, `429@Nms`).
impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, rule) in self.rules.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{rule}")?;
        }
        Ok(())
    }
}

impl FromStr for FaultSpec {
    type Err = FaultSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut rules = Vec::new();
        for rule in s.split(',').map(str::trim).filter(|r| !r.is_empty()) {
            let err = |cause: &str| FaultSpecError {
                rule: rule.to_owned(),
                cause: cause.to_owned(),
            };
            let (target, rest) = rule
                .split_once(':')
                .ok_or_else(|| err("expected VERB[/RESOURCE]:FAULT=RATE"))?;
            let (fault, rate) = rest
                .split_once('=')
                .ok_or_else(|| err("expected VERB[/RESOURCE]:FAULT=RATE"))?;
            let (verb, resource) = match target.split_once('/') {
                Some((v, r)) => (v.trim(), r.trim()),
                None => (target.trim(), "*"),
            };
            let verb = match verb {
                "*" => None,
                v => Some(Verb::ALL.into_iter().find(|x| x.as_str() == v).ok_or_else(|| {
                    err("unknown verb (get, list, watch, create, update, patch, apply, delete, event, *)")
                })?),
            };
            let resource = match resource {
                "*" => None,
                "" => return Err(err("empty resource after '/'")),
                r => Some(r.to_owned()),
            };
            let fault = parse_fault(fault.trim()).map_err(|c| err(&c))?;
            if fault == Fault::Close && verb != Some(Verb::Watch) {
                return Err(err("`close` applies to watches only (watch:close=RATE)"));
            }
            let rate: f64 = rate
                .trim()
                .parse()
                .map_err(|_| err("the rate is not a number"))?;
            if !(0.0..=1.0).contains(&rate) {
                return Err(err("the rate must be between 0 and 1"));
            }
            rules.push(Rule {
                verb,
                resource,
                fault,
                rate,
            });
        }
        Ok(Self { rules })
    }
}

fn parse_fault(s: &str) -> Result<Fault, String> {
    Ok(match s {
        "refused" => Fault::Refused,
        "reset" => Fault::Reset,
        "eof" => Fault::Eof,
        "timeout" => Fault::Timeout,
        "close" => Fault::Close,
        _ => {
            let (code, after) = match s.split_once('@') {
                Some((c, a)) => (c, Some(a)),
                None => (s, None),
            };
            let code: u16 = code.parse().map_err(|_| {
                format!(
                    "unknown fault {s:?} (refused, reset, eof, timeout, close, or an HTTP status)"
                )
            })?;
            if !(400..600).contains(&code) {
                return Err(format!("{code} is not an error status"));
            }
            let retry_after = match after {
                None => None,
                Some(a) => {
                    let ns = crate::go::parse_go_duration(a)
                        .filter(|n| *n >= 0)
                        .ok_or_else(|| format!("bad Retry-After duration {a:?}"))?;
                    Some(Duration::from_nanos(ns as u64))
                }
            };
            Fault::Status { code, retry_after }
        }
    })
}

/// The live injector: a spec (replaceable while it serves), scripted failures, a seeded
/// random source and counters.
#[derive(Debug)]
pub struct Faults {
    state: Mutex<State>,
}

/// One injected fault's count: which verb, on which resource (`""` when the caller does
/// not name resources), which fault.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Injected {
    /// The verb.
    pub verb: Verb,
    /// The resource's plural name, or `""`.
    pub resource: String,
    /// The fault.
    pub fault: Fault,
}

#[derive(Debug)]
struct State {
    spec: FaultSpec,
    rng: Rng,
    script: BTreeMap<Verb, VecDeque<Fault>>,
    injected: BTreeMap<Injected, u64>,
    requests: BTreeMap<Verb, u64>,
}

impl Faults {
    /// An injector for `spec`, drawing with `seed`.
    pub fn new(spec: FaultSpec, seed: u64) -> Self {
        Self {
            state: Mutex::new(State {
                spec,
                rng: Rng::seeded(seed),
                script: BTreeMap::new(),
                injected: BTreeMap::new(),
                requests: BTreeMap::new(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Make the next requests of `verb` fail with `faults`, in order (before any rule).
    pub fn script(&self, verb: Verb, faults: impl IntoIterator<Item = Fault>) {
        self.state().script.entry(verb).or_default().extend(faults);
    }

    /// Replace the rules; scripted failures and counters stay.
    pub fn set_spec(&self, spec: FaultSpec) {
        self.state().spec = spec;
    }

    /// The rules in force.
    pub fn spec(&self) -> FaultSpec {
        self.state().spec.clone()
    }

    /// Decide the fate of one request: `Some(fault)` to fail it.
    pub fn draw(&self, verb: Verb) -> Option<Fault> {
        self.draw_for(verb, "")
    }

    /// Decide the fate of one request on `resource` (a plural name, `""` for none).
    pub fn draw_for(&self, verb: Verb, resource: &str) -> Option<Fault> {
        let state = &mut *self.state();
        *state.requests.entry(verb).or_default() += 1;
        let fault = match state.script.get_mut(&verb).and_then(VecDeque::pop_front) {
            Some(f) => Some(f),
            None => {
                let rng = &mut state.rng;
                state
                    .spec
                    .rules
                    .iter()
                    .filter(|r| r.applies(verb, resource))
                    .find(|r| r.rate > 0.0 && rng.unit() < r.rate)
                    .map(|r| r.fault)
            }
        };
        if let Some(fault) = fault {
            let key = Injected {
                verb,
                resource: resource.to_owned(),
                fault,
            };
            *state.injected.entry(key).or_default() += 1;
        }
        fault
    }

    /// A uniform random number in `[0, 1)` from the injector's seeded source (how long
    /// before a watch drawn for `close` is closed ...).
    pub fn unit(&self) -> f64 {
        self.state().rng.unit()
    }

    /// How many faults were injected, per verb and fault.
    pub fn injected(&self) -> BTreeMap<(Verb, Fault), u64> {
        let mut by_verb = BTreeMap::new();
        for (k, n) in &self.state().injected {
            *by_verb.entry((k.verb, k.fault)).or_default() += n;
        }
        by_verb
    }

    /// How many faults were injected, per verb, resource and fault.
    pub fn injected_by_resource(&self) -> BTreeMap<Injected, u64> {
        self.state().injected.clone()
    }

    /// The total number of injected faults.
    pub fn injected_total(&self) -> u64 {
        self.state().injected.values().sum()
    }

    /// How many requests each verb saw.
    pub fn requests(&self) -> BTreeMap<Verb, u64> {
        self.state().requests.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rules() {
        let spec: FaultSpec = "patch:409=0.1, *:reset=0.05,create:429@2s=0.2,delete:timeout=1"
            .parse()
            .expect("valid");
        assert_eq!(spec.rules.len(), 4);
        assert_eq!(spec.rules[0].verb, Some(Verb::Patch));
        assert_eq!(spec.rules[1].verb, None);
        assert_eq!(
            spec.rules[2].fault,
            Fault::Status {
                code: 429,
                retry_after: Some(Duration::from_secs(2))
            }
        );
        assert!("".parse::<FaultSpec>().expect("empty").is_empty());
        let spec: FaultSpec = "patch/pods:500=0.25,watch:close=0.5,*/nodes:429@1s=1"
            .parse()
            .expect("valid");
        assert_eq!(spec.rules[0].resource.as_deref(), Some("pods"));
        assert!(spec.rules[0].applies(Verb::Patch, "pods"));
        assert!(!spec.rules[0].applies(Verb::Patch, "nodes"));
        assert!(spec.rules[2].applies(Verb::Get, "nodes"));
        // Display gives back a spec that parses to the same rules.
        let again: FaultSpec = spec.to_string().parse().expect("round trip");
        assert_eq!(again, spec);
    }

    #[test]
    fn rejects_bad_rules_with_the_rule() {
        for (bad, cause) in [
            ("patch", ":FAULT=RATE"),
            ("poke:409=0.1", "unknown verb"),
            ("patch:teapot=0.1", "unknown fault"),
            ("patch:200=0.1", "not an error status"),
            ("patch:409=2", "between 0 and 1"),
            ("patch:429@soon=0.1", "Retry-After"),
            ("patch:close=0.1", "watches only"),
            ("patch/:500=0.1", "empty resource"),
        ] {
            let e = bad.parse::<FaultSpec>().expect_err(bad);
            assert!(e.to_string().contains(cause), "{bad}: {e}");
            assert!(e.to_string().contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn rates_are_observed_within_bounds() {
        let faults = Faults::new("patch:503=0.2,get:reset=0.5".parse().expect("valid"), 42);
        let n = 20_000;
        let mut patch_failures = 0;
        let mut get_failures = 0;
        for _ in 0..n {
            patch_failures += u32::from(faults.draw(Verb::Patch).is_some());
            get_failures += u32::from(faults.draw(Verb::Get).is_some());
            assert_eq!(faults.draw(Verb::Delete), None);
        }
        // Binomial: 4 standard deviations.
        let check = |got: u32, p: f64| {
            let mean = n as f64 * p;
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            assert!((f64::from(got) - mean).abs() < 4.0 * sd, "{got} vs {mean}");
        };
        check(patch_failures, 0.2);
        check(get_failures, 0.5);
        assert_eq!(
            faults.injected_total(),
            u64::from(patch_failures + get_failures)
        );
        assert_eq!(faults.requests()[&Verb::Delete], n as u64);
    }

    #[test]
    fn transient_spreads_the_rate_evenly() {
        let faults = Faults::new(FaultSpec::transient(0.2), 7);
        let n = 50_000;
        let failures = (0..n)
            .filter(|_| faults.draw(Verb::Patch).is_some())
            .count();
        let p = failures as f64 / n as f64;
        assert!((p - 0.2).abs() < 0.01, "{p}");
        let injected = faults.injected();
        assert_eq!(injected.len(), 5, "{injected:?}");
        for count in injected.values() {
            let share = *count as f64 / failures as f64;
            assert!((share - 0.2).abs() < 0.03, "{injected:?}");
        }
    }

    #[test]
    fn scripted_faults_come_first_and_in_order() {
        let faults = Faults::new(FaultSpec::none(), 1);
        faults.script(Verb::Patch, [Fault::Timeout, Fault::Reset]);
        assert_eq!(faults.draw(Verb::Patch), Some(Fault::Timeout));
        assert_eq!(faults.draw(Verb::Get), None);
        assert_eq!(faults.draw(Verb::Patch), Some(Fault::Reset));
        assert_eq!(faults.draw(Verb::Patch), None);
    }
}
