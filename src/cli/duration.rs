//! Durations on the command line, in Go's syntax (`90s`, `1h30m`, `250ms`), as KWOK's
//! users write them.

use chrono::TimeDelta;

use crate::go::parse_go_duration;

/// Parse a Go duration for a command-line flag; negative durations are refused.
pub fn parse_duration(text: &str) -> Result<TimeDelta, String> {
    match parse_go_duration(text.trim()) {
        Some(ns) if ns >= 0 => Ok(TimeDelta::nanoseconds(ns)),
        Some(_) => Err(format!("{text:?} is negative")),
        None => Err(format!(
            "{text:?} is not a duration: use Go's syntax, e.g. 90s, 1h30m, 250ms"
        )),
    }
}

/// [`parse_duration`] for a length of time that cannot be negative.
pub fn parse_std_duration(text: &str) -> Result<std::time::Duration, String> {
    parse_duration(text)?
        .to_std()
        .map_err(|_| format!("{text:?} is negative"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_duration("90s"), Ok(TimeDelta::seconds(90)));
        assert_eq!(parse_duration("1h30m"), Ok(TimeDelta::minutes(90)));
        assert_eq!(parse_duration("250ms"), Ok(TimeDelta::milliseconds(250)));
        assert_eq!(parse_duration("0"), Ok(TimeDelta::zero()));
    }

    #[test]
    fn rejects_garbage_and_negative_durations() {
        for bad in ["", "10", "5 days", "3d", "s"] {
            assert!(
                parse_duration(bad)
                    .expect_err("an error")
                    .contains("not a duration"),
                "{bad}"
            );
        }
        assert!(
            parse_duration("-1s")
                .expect_err("an error")
                .contains("negative")
        );
    }
}
