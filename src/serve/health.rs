//! Health and readiness checks, answered as kube-apiserver answers `/livez`, `/readyz`
//! and `/healthz`: `ok` when every check passes, else HTTP 500 and one line per check
//! (`[+]name ok`, `[-]name failed: why`); `?verbose` lists the checks either way;
//! `?exclude=name` leaves a check out.

use std::sync::Arc;

/// One named check: `Ok` or why it fails.
pub struct Check {
    name: &'static str,
    run: Box<dyn Fn() -> Result<(), String> + Send + Sync>,
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check").field("name", &self.name).finish()
    }
}

impl Check {
    /// A check named `name` (`[a-z-]`, as kube-apiserver's).
    pub fn new(
        name: &'static str,
        run: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name,
            run: Box::new(run),
        }
    }

    /// The check's name.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

/// The answer to a probe: whether it passed, and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Every check that ran passed.
    pub passed: bool,
    /// The text to send.
    pub body: String,
}

/// Run `checks` for the probe `probe` (`livez`, `readyz`, `healthz`), leaving out those
/// named in `exclude`.
pub fn run(probe: &str, checks: &[Arc<Check>], verbose: bool, exclude: &[String]) -> Report {
    let mut lines = String::new();
    let mut passed = true;
    for check in checks
        .iter()
        .filter(|c| !exclude.iter().any(|e| e == c.name))
    {
        match (check.run)() {
            Ok(()) => lines.push_str(&format!("[+]{} ok\n", check.name)),
            Err(why) => {
                passed = false;
                let why = why.replace('\n', " ");
                lines.push_str(&format!("[-]{} failed: {why}\n", check.name));
            }
        }
    }
    let body = match (passed, verbose) {
        (true, false) => "ok".to_owned(),
        (true, true) => format!("{lines}{probe} check passed\n"),
        (false, _) => format!("{lines}{probe} check failed\n"),
    };
    Report { passed, body }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checks() -> Vec<Arc<Check>> {
        vec![
            Arc::new(Check::new("ping", || Ok(()))),
            Arc::new(Check::new("informer-sync", || {
                Err("v1/Pod: initial list\nnot handled".into())
            })),
        ]
    }

    #[test]
    fn passes_quietly_and_lists_when_asked() {
        let ok = &checks()[..1];
        assert_eq!(run("livez", ok, false, &[]).body, "ok");
        let verbose = run("livez", ok, true, &[]);
        assert!(verbose.passed);
        assert_eq!(verbose.body, "[+]ping ok\nlivez check passed\n");
    }

    #[test]
    fn a_failure_lists_every_check_with_its_reason() {
        let report = run("readyz", &checks(), false, &[]);
        assert!(!report.passed);
        assert_eq!(
            report.body,
            "[+]ping ok\n[-]informer-sync failed: v1/Pod: initial list not handled\nreadyz check failed\n"
        );
        let excluded = run("readyz", &checks(), false, &["informer-sync".to_owned()]);
        assert!(excluded.passed, "{excluded:?}");
    }
}
