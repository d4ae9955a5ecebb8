//! KWOK's golden corpus: every `testdata/NAME.input.yaml` through
//! `kstage stage explain --kwok-golden` must give `NAME.output.yaml`, compared as parsed
//! YAML (parsed by serde-saphyr directly, not by kstage's own YAML code).

use std::path::{Path, PathBuf};

use crate::{kstage, kwok_dir};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("readable corpus folder") {
            let path = entry.expect("folder entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.to_string_lossy().ends_with(".input.yaml") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn parse(text: &str, what: &str) -> serde_json::Value {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{what} is not YAML: {e}\n{text}"))
}

#[test]
fn kwok_golden_corpus() {
    let dir = kwok_dir().join("stage");
    assert!(
        dir.is_dir(),
        "the KWOK corpus is missing at {} (set KSTAGE_KWOK_DIR); this test must not skip",
        dir.display()
    );
    let inputs = inputs(&dir);
    assert!(
        inputs.len() >= 10,
        "expected the corpus's 10+ golden pairs, found {}",
        inputs.len()
    );
    let mut failures = Vec::new();
    for input in &inputs {
        let set = input.parent().and_then(Path::parent).expect("set folder");
        let expected_path = PathBuf::from(
            input
                .to_string_lossy()
                .replace(".input.yaml", ".output.yaml"),
        );
        let expected = std::fs::read_to_string(&expected_path).expect("golden output exists");
        let out = kstage(&[
            "stage",
            "explain",
            "--kwok-golden",
            "--stages",
            &set.to_string_lossy(),
            &input.to_string_lossy(),
        ]);
        let name = input
            .strip_prefix(&dir)
            .unwrap_or(input)
            .display()
            .to_string();
        if !out.status.success() {
            failures.push(format!(
                "{name}: kstage failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
            continue;
        }
        let got = String::from_utf8_lossy(&out.stdout).to_string();
        if parse(&got, "kstage output") != parse(&expected, "golden output") {
            failures.push(format!(
                "{name}: differs\n--- expected\n{expected}\n--- got\n{got}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} golden pairs failed:\n{}",
        failures.len(),
        inputs.len(),
        failures.join("\n")
    );
}
