//! Fault injection for the in-memory cluster: failures by verb, at a rate or scripted.
//!
//! A spec is a comma-separated list of `VERB:FAULT=RATE` rules, e.g.
//! `patch:409=0.1,*:reset=0.05,create:429@2s=0.2`:
//! - `VERB`: `get`, `create`, `patch`, `apply`, `delete`, `event`, or `*` for all;
//! - `FAULT`: `refused`, `reset`, `eof`, `timeout`, an HTTP status (`409`, `500`, `503`
//!   ...), or `429@DURATION` for Too Many Requests with a `Retry-After`;
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
}

impl Verb {
    /// All verbs.
    pub const ALL: [Verb; 6] = [
        Verb::Get,
        Verb::Create,
        Verb::Patch,
        Verb::Apply,
        Verb::Delete,
        Verb::Event,
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
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Refused => f.write_str("refused"),
            Fault::Reset => f.write_str("reset"),
            Fault::Eof => f.write_str("eof"),
            Fault::Timeout => f.write_str("timeout"),
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
    fault: Fault,
    rate: f64,
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

impl FromStr for FaultSpec {
    type Err = FaultSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut rules = Vec::new();
        for rule in s.split(',').map(str::trim).filter(|r| !r.is_empty()) {
            let err = |cause: &str| FaultSpecError {
                rule: rule.to_owned(),
                cause: cause.to_owned(),
            };
            let (verb, rest) = rule
                .split_once(':')
                .ok_or_else(|| err("expected VERB:FAULT=RATE"))?;
            let (fault, rate) = rest
                .split_once('=')
                .ok_or_else(|| err("expected VERB:FAULT=RATE"))?;
            let verb =
                match verb.trim() {
                    "*" => None,
                    v => Some(Verb::ALL.into_iter().find(|x| x.as_str() == v).ok_or_else(
                        || err("unknown verb (get, create, patch, apply, delete, event, *)"),
                    )?),
                };
            let fault = parse_fault(fault.trim()).map_err(|c| err(&c))?;
            let rate: f64 = rate
                .trim()
                .parse()
                .map_err(|_| err("the rate is not a number"))?;
            if !(0.0..=1.0).contains(&rate) {
                return Err(err("the rate must be between 0 and 1"));
            }
            rules.push(Rule { verb, fault, rate });
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
        _ => {
            let (code, after) = match s.split_once('@') {
                Some((c, a)) => (c, Some(a)),
                None => (s, None),
            };
            let code: u16 = code.parse().map_err(|_| {
                format!("unknown fault {s:?} (refused, reset, eof, timeout, or an HTTP status)")
            })?;
            if !(400..600).contains(&code) {
                return Err(format!("{code} is not an error status"));
            }
            let retry_after = match after {
                None => None,
                Some(a) => {
                    let ns = crate::stage::value::parse_go_duration(a)
                        .filter(|n| *n >= 0)
                        .ok_or_else(|| format!("bad Retry-After duration {a:?}"))?;
                    Some(Duration::from_nanos(ns as u64))
                }
            };
            Fault::Status { code, retry_after }
        }
    })
}

/// The live injector: a spec, scripted failures, a seeded random source and counters.
#[derive(Debug)]
pub struct Faults {
    spec: FaultSpec,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    rng: Rng,
    script: BTreeMap<Verb, VecDeque<Fault>>,
    injected: BTreeMap<(Verb, Fault), u64>,
    requests: BTreeMap<Verb, u64>,
}

impl Faults {
    /// An injector for `spec`, drawing with `seed`.
    pub fn new(spec: FaultSpec, seed: u64) -> Self {
        Self {
            spec,
            state: Mutex::new(State {
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

    /// Decide the fate of one request: `Some(fault)` to fail it.
    pub fn draw(&self, verb: Verb) -> Option<Fault> {
        let mut state = self.state();
        *state.requests.entry(verb).or_default() += 1;
        let fault = match state.script.get_mut(&verb).and_then(VecDeque::pop_front) {
            Some(f) => Some(f),
            None => self
                .spec
                .rules
                .iter()
                .filter(|r| r.verb.is_none_or(|v| v == verb))
                .find(|r| r.rate > 0.0 && state.rng.unit() < r.rate)
                .map(|r| r.fault),
        };
        if let Some(f) = fault {
            *state.injected.entry((verb, f)).or_default() += 1;
        }
        fault
    }

    /// How many faults were injected, per verb and fault.
    pub fn injected(&self) -> BTreeMap<(Verb, Fault), u64> {
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
    }

    #[test]
    fn rejects_bad_rules_with_the_rule() {
        for (bad, cause) in [
            ("patch", "VERB:FAULT=RATE"),
            ("poke:409=0.1", "unknown verb"),
            ("patch:teapot=0.1", "unknown fault"),
            ("patch:200=0.1", "not an error status"),
            ("patch:409=2", "between 0 and 1"),
            ("patch:429@soon=0.1", "Retry-After"),
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
