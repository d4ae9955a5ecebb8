//! KWOK's golden corpus as a test: every Stage template, rendered with [`GoldenEnv`] against
//! each `testdata/*.input.yaml`, gives exactly the patch `data` of the matching
//! `*.output.yaml`; and [`crate::yaml::to_string`] rewrites each output file byte for byte.
//!
//! The corpus lives in `../shared/kwok` from the project root, or where `KSTAGE_KWOK_DIR`
//! points.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use super::{GoldenEnv, Renderer};
use crate::yaml;

/// The corpus, as `build.rs` resolved it.
fn kwok_dir() -> PathBuf {
    PathBuf::from(env!("KSTAGE_KWOK_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// `stage/<resource>/<set>` folders.
fn stage_sets() -> Vec<PathBuf> {
    let root = kwok_dir().join("stage");
    assert!(
        root.is_dir(),
        "KWOK corpus not found at {} (set KSTAGE_KWOK_DIR)",
        root.display()
    );
    let mut sets = Vec::new();
    for resource in std::fs::read_dir(&root).expect("stage dir") {
        let resource = resource.expect("dir entry").path();
        if !resource.is_dir() {
            continue;
        }
        for set in std::fs::read_dir(&resource).expect("resource dir") {
            let set = set.expect("dir entry").path();
            if set.is_dir() {
                sets.push(set);
            }
        }
    }
    sets.sort();
    sets
}

/// The Stage documents of a set folder.
fn stages_of(set: &Path) -> Vec<Value> {
    yaml_files(set)
        .iter()
        .flat_map(|f| yaml::documents(&read(f)).unwrap_or_else(|e| panic!("{}: {e}", f.display())))
        .filter(|doc| doc["kind"] == "Stage")
        .collect()
}

/// Every template of a Stage, with the root its rendered JSON goes under.
fn templates_of(stage: &Value) -> Vec<(String, Option<String>, String)> {
    let name = stage["metadata"]["name"].as_str().unwrap_or_default();
    let spec = &stage["spec"];
    let mut out = Vec::new();
    if let Some(src) = spec["next"]["statusTemplate"].as_str() {
        out.push((
            format!("{name}/spec.next.statusTemplate"),
            Some("status".to_owned()),
            src.to_owned(),
        ));
    }
    for (i, step) in spec["steps"].as_array().into_iter().flatten().enumerate() {
        for kind in ["patch", "apply"] {
            if let Some(src) = step[kind]["template"].as_str() {
                out.push((
                    format!("{name}/spec.steps[{i}].{kind}.template"),
                    step[kind]["root"].as_str().map(str::to_owned),
                    src.to_owned(),
                ));
            }
        }
    }
    out
}

/// The legacy `spec.next.statusTemplate` of Stage `name` in `stage/<set>`.
pub(super) fn status_template(set: &str, name: &str) -> String {
    let stage = stages_of(&kwok_dir().join("stage").join(set))
        .into_iter()
        .find(|s| s["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no stage {name} in {set}"));
    stage["spec"]["next"]["statusTemplate"]
        .as_str()
        .expect("statusTemplate")
        .to_owned()
}

#[test]
fn corpus_templates_render_kwok_golden_outputs() {
    let renderer = Renderer::new(Arc::new(GoldenEnv));
    let mut compared = 0;
    for set in stage_sets() {
        let testdata = set.join("testdata");
        if !testdata.is_dir() {
            continue;
        }
        let stages = stages_of(&set);
        for input in yaml_files(&testdata) {
            let Some(base) = input.to_str().and_then(|p| p.strip_suffix(".input.yaml")) else {
                continue;
            };
            let obj = yaml::to_json(&read(&input)).expect("input object");
            let expected = yaml::to_json(&read(Path::new(&format!("{base}.output.yaml"))))
                .expect("output file");
            for entry in expected["stages"].as_array().expect("stages list") {
                let stage_name = entry["stage"].as_str().expect("stage name");
                let stage = stages
                    .iter()
                    .find(|s| s["metadata"]["name"] == stage_name)
                    .unwrap_or_else(|| panic!("{base}: no stage {stage_name}"));
                let want: Vec<&Value> = entry["next"]
                    .as_array()
                    .expect("next list")
                    .iter()
                    .filter(|n| n["kind"] == "patch")
                    .map(|n| &n["data"])
                    .collect();
                let got: Vec<Value> = templates_of(stage)
                    .into_iter()
                    .map(|(name, root, src)| {
                        let template = renderer.parse(&name, &src).expect("parses");
                        let text = template.render(&obj).expect("renders");
                        assert!(yaml::takes_fast_path(&text), "{name}: slow YAML path");
                        let data = template
                            .render_json(&obj)
                            .unwrap_or_else(|e| panic!("{base}: {e}"));
                        match root {
                            Some(root) => json!({ root: data }),
                            None => data,
                        }
                    })
                    .collect();
                assert_eq!(got.len(), want.len(), "{base}: {stage_name}");
                for (got, want) in got.iter().zip(want) {
                    assert_eq!(got, want, "{base}: stage {stage_name}");
                    compared += 1;
                }
            }
        }
    }
    assert!(compared >= 7, "only {compared} golden patches compared");
}

#[test]
fn corpus_outputs_are_rewritten_byte_for_byte() {
    let mut files = 0;
    for set in stage_sets() {
        let testdata = set.join("testdata");
        if !testdata.is_dir() {
            continue;
        }
        for file in yaml_files(&testdata) {
            if !file.to_string_lossy().ends_with(".output.yaml") {
                continue;
            }
            let text = read(&file);
            let value = yaml::to_json(&text).expect("output file");
            assert_eq!(yaml::to_string(&value), text, "{}", file.display());
            files += 1;
        }
    }
    assert!(files >= 10, "only {files} output files");
}

#[test]
fn every_corpus_template_parses_and_renders() {
    let renderer = Renderer::new(Arc::new(GoldenEnv));
    let pvc = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "ns", "uid": "u-1", "resourceVersion": "7"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "kwok-volume",
            "volumeName": "pvc-u-1"
        }
    });
    let mut parsed = 0;
    for set in stage_sets() {
        for stage in stages_of(&set) {
            for (name, _, src) in templates_of(&stage) {
                let template = renderer
                    .parse(&name, &src)
                    .unwrap_or_else(|e| panic!("{e}"));
                parsed += 1;
                if stage["spec"]["resourceRef"]["kind"] == "PersistentVolumeClaim" {
                    template.render_json(&pvc).unwrap_or_else(|e| panic!("{e}"));
                }
            }
        }
    }
    assert!(parsed >= 15, "only {parsed} templates");
}

#[test]
fn pvc_provision_renders_nested_yaml() {
    let renderer = Renderer::new(Arc::new(GoldenEnv));
    let set = kwok_dir().join("stage/volume/fast");
    let stage = stages_of(&set)
        .into_iter()
        .find(|s| s["metadata"]["name"] == "pvc-provision")
        .expect("pvc-provision stage");
    let templates = templates_of(&stage);
    let pvc = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "ns", "uid": "u-1", "resourceVersion": "7"},
        "spec": {
            "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "kwok-volume"
        }
    });
    let render = |i: usize| {
        renderer
            .parse(&templates[i].0, &templates[i].2)
            .expect("parses")
            .render_json(&pvc)
            .expect("renders")
    };
    let pv = render(0);
    assert_eq!(pv["metadata"]["name"], "pvc-u-1");
    assert_eq!(
        pv["spec"]["accessModes"],
        json!(["ReadWriteOnce", "ReadOnlyMany"])
    );
    assert_eq!(pv["spec"]["capacity"], json!({"storage": "1Gi"}));
    assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Delete");
    assert_eq!(pv["spec"]["volumeMode"], "Filesystem");
    assert_eq!(pv["spec"]["claimRef"]["resourceVersion"], "7");
    assert_eq!(
        pv["spec"]["hostPath"]["path"],
        "/tmp/kwok-local-path-provisioner/pvc-u-1"
    );
    // Quoted "yes" stays a string.
    let annotations = render(1);
    assert_eq!(
        annotations["annotations"]["pv.kubernetes.io/bind-completed"],
        "yes"
    );
    let status = render(3);
    assert_eq!(status["phase"], "Bound");
    assert_eq!(
        status["accessModes"],
        json!(["ReadWriteOnce", "ReadOnlyMany"])
    );
    assert_eq!(status["capacity"], json!({"storage": "1Gi"}));
}

/// Every input object of the corpus, and a few objects with the fields templates read
/// missing, null, or of another type.
fn corpus_objects() -> Vec<Value> {
    let mut objects = Vec::new();
    for set in stage_sets() {
        let testdata = set.join("testdata");
        if !testdata.is_dir() {
            continue;
        }
        for input in yaml_files(&testdata) {
            if input.to_string_lossy().ends_with(".input.yaml") {
                objects.push(yaml::to_json(&read(&input)).expect("input object"));
            }
        }
    }
    let variants: Vec<Value> = objects
        .iter()
        .flat_map(|obj| {
            let mut out = Vec::new();
            for field in ["metadata", "spec", "status"] {
                for replacement in [None, Some(Value::Null), Some(json!("x")), Some(json!([1]))] {
                    let mut v = obj.clone();
                    if let Some(map) = v.as_object_mut() {
                        match &replacement {
                            None => {
                                map.remove(field);
                            }
                            Some(r) => {
                                map.insert(field.to_owned(), r.clone());
                            }
                        }
                    }
                    out.push(v);
                }
            }
            out
        })
        .collect();
    objects.extend(variants);
    objects.extend([
        json!({}),
        Value::Null,
        json!({"spec": {"containers": "no"}}),
    ]);
    objects
}

#[test]
fn pruned_renders_match_full_renders_on_the_corpus() {
    let renderer = Renderer::new(Arc::new(GoldenEnv));
    let objects = corpus_objects();
    let (mut templates, mut pruned) = (0, 0);
    for set in stage_sets() {
        for stage in stages_of(&set) {
            for (name, _, src) in templates_of(&stage) {
                let template = renderer.parse(&name, &src).expect("parses");
                templates += 1;
                pruned += usize::from(template.is_pruned());
                for obj in &objects {
                    let full = template.render_unpruned(obj).map_err(|e| e.to_string());
                    let part = template.render(obj).map_err(|e| e.to_string());
                    assert_eq!(part, full, "{name} on {obj}");
                }
            }
        }
    }
    assert!(templates >= 15, "only {templates} templates");
    assert!(
        pruned * 2 >= templates,
        "only {pruned} of {templates} templates pruned"
    );
}
