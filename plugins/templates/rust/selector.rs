//! {{name}}: a kstage selector plugin.
//!
//! Plays the heaviest candidate Stage (the first of equal weights) instead of kstage's
//! weighted random choice, and lets no Stage wait longer than `MAX_DELAY_MS`.

use kstage_plugin as kp;

/// The longest a chosen Stage may wait, in milliseconds.
const MAX_DELAY_MS: i64 = 1000;

struct {{NameCamel}};

impl kp::Plugin for {{NameCamel}} {
    fn info() -> kp::Info {
        kp::Info::new("{{name}}", "0.1.0")
    }
}

impl kp::Selector for {{NameCamel}} {
    fn select(
        _object: &kp::Object,
        candidates: &[kp::Candidate],
    ) -> Result<Option<kp::Selection>, String> {
        // The object is at hand: `_object.get_str(".spec.nodeName")`,
        // `_object.label("app")`, `_object.annotation("example.com/next")`.
        // `max_by_key` keeps the last of equal keys: reversed, the first one wins.
        let Some(heaviest) = candidates.iter().rev().max_by_key(|c| c.weight) else {
            return Ok(None);
        };
        // `None` keeps the delay kstage drew for the Stage.
        let delay_ms = heaviest.delay_ms.filter(|&d| d > MAX_DELAY_MS).map(|_| MAX_DELAY_MS);
        Ok(Some(kp::Selection {
            stage: heaviest.name.clone(),
            delay_ms,
        }))
    }
}

kp::export!({{NameCamel}}: selector);
