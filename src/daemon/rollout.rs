//! A StagePlugin's rollout as its status shows it: `status.rollout` (the version
//! analysed, its share and mode, when it began, the phase and why) and
//! `status.analysis.<replica>` (each replica's figures for both versions).
//!
//! ```yaml
//! status:
//!   rollout:
//!     digest: 9b2c...          # the version analysed
//!     version: 2.0.0
//!     canary: 20
//!     mode: split
//!     startTime: "2026-12-05T12:00:00Z"
//!     phase: RolledBack        # Analysing, Promoted, RolledBack, Superseded
//!     message: error rate 40% (4 of 10 calls) is above maxErrorRate 1%
//!     decidedBy: kstage-0      # the replica whose verdict was recorded first
//!   analysis:
//!     kstage-0:
//!       digest: 9b2c...
//!       stable: {calls: 40, errors: 0, p99Micros: 3.1}
//!       canary: {calls: 10, errors: 4, p99Micros: 3.4, compared: 6, disagreements: 0}
//!       time: "2026-12-05T12:00:05Z"
//! ```
//!
//! Each replica analyses the calls it makes; the first verdict written (with the
//! object's `resourceVersion` as a precondition) is the one every replica applies. A
//! replica's figures are written under its own key without a precondition, so replicas
//! never conflict over them.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use crate::plugin::rollout::{Outcome, Phase, Tally, Verdict};
use crate::plugin::set::RolloutReport;

/// What `status.rollout` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The digest of the version analysed.
    pub digest: String,
    /// Its own version (`metadata.info`).
    pub version: String,
    /// Its share of the calls, in percent.
    pub canary: u8,
    /// `split` or `shadow`.
    pub mode: String,
    /// When the analysis began.
    pub started: String,
    /// `None` while analysing.
    pub outcome: Option<Outcome>,
    /// Why (the verdict's message), or what is going on.
    pub message: String,
    /// The replica whose verdict was recorded.
    pub decided_by: Option<String>,
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl Record {
    /// The rollout `report` describes, as it stands (a verdict only proposed is still
    /// `Analysing`: it is not recorded yet).
    pub fn of(report: &RolloutReport) -> Self {
        let (outcome, message) = match &report.phase {
            Phase::Settled(v) => (Some(v.outcome), v.message.clone()),
            Phase::Analysing | Phase::Proposed(_) => (
                None,
                format!(
                    "version {:?} takes {}% of the calls ({}) from {}, analysed for at least {:?} and {} calls; version {:?} serves the rest",
                    report.canary.info().version,
                    report.rollout.canary,
                    report.rollout.mode.as_str(),
                    time(report.started),
                    report.rollout.analysis.duration,
                    report.rollout.analysis.min_calls,
                    report.stable.info().version,
                ),
            ),
        };
        Self {
            digest: report.canary.digest().to_owned(),
            version: report.canary.info().version.clone(),
            canary: report.rollout.canary,
            mode: report.rollout.mode.as_str().to_owned(),
            started: time(report.started),
            outcome,
            message,
            decided_by: None,
        }
    }

    /// `report`'s rollout decided by `verdict` at replica `replica`.
    pub fn decided(report: &RolloutReport, verdict: &Verdict, replica: &str) -> Self {
        Self {
            outcome: Some(verdict.outcome),
            message: verdict.message.clone(),
            decided_by: Some(replica.to_owned()),
            ..Self::of(report)
        }
    }

    /// `Analysing`, or the outcome.
    pub fn phase(&self) -> &'static str {
        self.outcome.map_or("Analysing", Outcome::as_str)
    }

    /// The verdict recorded, if any.
    pub fn verdict(&self) -> Option<Verdict> {
        self.outcome.map(|outcome| Verdict {
            outcome,
            message: self.message.clone(),
        })
    }

    /// `status.rollout`.
    pub fn to_json(&self) -> Value {
        let mut value = json!({
            "digest": self.digest,
            "version": self.version,
            "canary": self.canary,
            "mode": self.mode,
            "startTime": self.started,
            "phase": self.phase(),
            "message": self.message,
        });
        if let Some(replica) = &self.decided_by {
            value["decidedBy"] = json!(replica);
        }
        value
    }

    /// What `object`'s `status.rollout` says, if it says anything readable.
    pub fn read(object: &Value) -> Option<Self> {
        let r = object.pointer("/status/rollout")?;
        let text = |field: &str| r.get(field).and_then(Value::as_str).map(str::to_owned);
        let phase = text("phase")?;
        let outcome = match phase.as_str() {
            "Analysing" => None,
            other => Some(Outcome::parse(other)?),
        };
        Some(Self {
            digest: text("digest")?,
            version: text("version").unwrap_or_default(),
            canary: r
                .get("canary")
                .and_then(Value::as_u64)
                .and_then(|n| u8::try_from(n).ok())
                .unwrap_or(0),
            mode: text("mode").unwrap_or_default(),
            started: text("startTime").unwrap_or_default(),
            outcome,
            message: text("message").unwrap_or_default(),
            decided_by: text("decidedBy"),
        })
    }
}

fn tally(t: &Tally, compared: bool) -> Value {
    let mut value = json!({"calls": t.calls, "errors": t.errors});
    if let Some(p99) = t.p99 {
        // Tenths of a microsecond: plugin calls take a few.
        value["p99Micros"] = json!((p99.as_secs_f64() * 1e7).round() / 10.0);
    }
    if compared {
        value["compared"] = json!(t.compared);
        value["disagreements"] = json!(t.disagreements);
    }
    value
}

/// This replica's figures for `report`, as `status.analysis.<replica>` holds them.
pub fn figures(report: &RolloutReport, now: DateTime<Utc>) -> Value {
    json!({
        "digest": report.canary.digest(),
        "stable": tally(&report.stable_figures, false),
        "canary": tally(&report.canary_figures, true),
        "time": time(now),
    })
}

/// The status patch writing `replica`'s figures and nothing else (no precondition).
pub fn figures_patch(replica: &str, report: &RolloutReport, now: DateTime<Utc>) -> Value {
    json!({"status": {"analysis": {replica: figures(report, now)}}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_what_it_writes() {
        let record = Record {
            digest: "ab".repeat(32),
            version: "2.0.0".into(),
            canary: 20,
            mode: "shadow".into(),
            started: "2026-12-05T12:00:00Z".into(),
            outcome: Some(Outcome::RolledBack),
            message: "error rate".into(),
            decided_by: Some("kstage-0".into()),
        };
        let object = json!({"status": {"rollout": record.to_json()}});
        assert_eq!(Record::read(&object), Some(record.clone()));
        assert_eq!(
            record.verdict().map(|v| v.outcome),
            Some(Outcome::RolledBack)
        );
        let analysing = Record {
            outcome: None,
            decided_by: None,
            ..record
        };
        let object = json!({"status": {"rollout": analysing.to_json()}});
        assert_eq!(object["status"]["rollout"]["phase"], "Analysing");
        assert_eq!(Record::read(&object), Some(analysing));
        assert_eq!(
            Record::read(&json!({"status": {"rollout": {"phase": "Maybe", "digest": "x"}}})),
            None
        );
    }
}
