//! The fuzz corpus replayed: every input kept in `fuzz/corpus/TARGET/` (the minimised
//! corpus of the `cargo fuzz` runs) and `fuzz/regressions/TARGET/` (inputs that once
//! crashed a target, each fixed) goes through the same function its fuzz target calls,
//! `kstage::fuzzing::TARGET`, and must pass it. Its own test binary: it installs the jq
//! and CEL evaluation sandbox for the whole process, as the kstage binary does.

use std::path::{Path, PathBuf};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_input_of_the_fuzz_corpus_passes_its_target() {
    kstage::fuzzing::install_sandbox(PathBuf::from(env!("CARGO_BIN_EXE_kstage")));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut failures = Vec::new();
    for (name, target) in kstage::fuzzing::TARGETS {
        let corpus = inputs(&root.join("corpus").join(name));
        assert!(
            corpus.len() >= 10,
            "fuzz/corpus/{name}: {} inputs; the corpus is missing",
            corpus.len()
        );
        let regressions = inputs(&root.join("regressions").join(name));
        for path in corpus.iter().chain(&regressions) {
            let data = std::fs::read(path).expect("readable");
            if let Err(panic) = std::panic::catch_unwind(|| target(&data)) {
                let why = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                failures.push(format!("{}: {why}", path.display()));
            }
        }
        eprintln!(
            "{name}: {} corpus inputs, {} regressions",
            corpus.len(),
            regressions.len()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
