//! Unit tests of the renderer and of every template function.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use serde_json::{Value, json};

use super::{GoldenEnv, Renderer, StageEnv, Template, TemplateEnv, TemplateError};
use crate::clock::ManualClock;

fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2006, 1, 2, 15, 4, 5)
        .single()
        .expect("valid time")
}

fn sim() -> (Arc<ManualClock>, Renderer) {
    let clock = Arc::new(ManualClock::new(start()));
    let env = StageEnv::new(clock.clone(), start(), "v0.7.0");
    (clock, Renderer::new(Arc::new(env)))
}

fn golden() -> Renderer {
    Renderer::new(Arc::new(GoldenEnv))
}

fn render_with(renderer: &Renderer, src: &str, obj: &Value) -> Result<String, TemplateError> {
    renderer.parse("t", src)?.render(obj)
}

fn render(src: &str, obj: &Value) -> String {
    render_with(&sim().1, src, obj).unwrap_or_else(|e| panic!("{src}: {e}"))
}

fn render_err(src: &str, obj: &Value) -> String {
    match render_with(&sim().1, src, obj) {
        Ok(out) => panic!("{src}: expected an error, got {out:?}"),
        Err(e) => e.to_string(),
    }
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "spec": {"nodeName": "node-0", "containers": [{"name": "c", "image": "i"}]},
    })
}

#[test]
fn template_is_send_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<Template>();
    check::<Renderer>();
    check::<TemplateError>();
}

#[test]
fn parse_errors_name_template_and_line() {
    let renderer = golden();
    let err = renderer
        .parse("pod-ready/statusTemplate", "a: 1\nb: {{ .x | }}\nc: 3\n")
        .expect_err("missing command");
    match &err {
        TemplateError::Parse { template, line, .. } => {
            assert_eq!(template, "pod-ready/statusTemplate");
            assert_eq!(*line, Some(2));
        }
        other => panic!("{other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("\"pod-ready/statusTemplate\""), "{text}");
    assert!(text.contains("line 2"), "{text}");

    // Lines count from the source as given, even though it is trimmed before parsing.
    let err = renderer
        .parse("t", "\n\n  {{ if }}\n")
        .expect_err("empty if");
    assert!(
        matches!(
            err,
            TemplateError::Parse {
                line: Some(3),
                column: Some(c),
                ..
            } if c > 2
        ),
        "{err:?}"
    );
    // Unknown functions fail at parse time, as in Go.
    let err = renderer
        .parse("t", "a: 1\nb: {{ if .x }}{{ .y | NoSuchFunc }}{{ end }}")
        .expect_err("undefined function");
    assert!(
        matches!(
            &err,
            TemplateError::Parse { line: Some(2), column: Some(23), message, .. }
                if message == "function \"NoSuchFunc\" not defined"
        ),
        "{err:?}"
    );
    for src in [
        "{{ (Nope 1).x }}",
        "{{ define \"x\" }}{{ Nope }}{{ end }}",
        "{{ with $x := Nope }}{{ end }}",
    ] {
        assert!(renderer.parse("t", src).is_err(), "{src}");
    }
}

#[test]
fn source_is_kept_and_trimmed_for_rendering() {
    let renderer = golden();
    let t = renderer
        .parse("t", "\n  a: {{ .x }}  \n\n")
        .expect("parses");
    assert_eq!(t.source(), "\n  a: {{ .x }}  \n\n");
    assert_eq!(t.name(), "t");
    // KWOK trims the source before parsing.
    assert_eq!(t.render(&json!({"x": 1})).expect("renders"), "a: 1");
}

#[test]
fn missing_keys_behave_like_go_maps() {
    let obj = json!({"metadata": {"name": "n"}, "status": {"list": [1, 2]}});
    assert_eq!(render("{{ .missing }}", &obj), "<no value>");
    assert_eq!(render("{{ .missing.deeper.still }}", &obj), "<no value>");
    assert_eq!(
        render("{{ or .metadata.creationTimestamp \"now\" }}", &obj),
        "now"
    );
    assert_eq!(
        render(
            "{{ with .status.allocatable }}yes{{ else }}no{{ end }}",
            &obj
        ),
        "no"
    );
    assert_eq!(render("{{ range .spec.containers }}x{{ end }}", &obj), "");
    assert_eq!(
        render(
            "{{ $n := .status.nodeInfo }}{{ or $n.arch \"amd64\" }}",
            &obj
        ),
        "amd64"
    );
    assert_eq!(render("{{ index .status.list 1 }}", &obj), "2");
    assert_eq!(
        render("{{ if eq .missing \"Always\" }}a{{ else }}b{{ end }}", &obj),
        "b"
    );
    // Go fails on `index` of a missing list; so does KWOK, and so do we.
    let err = render_err("{{ index .status.containerStatuses 0 }}", &obj);
    assert!(err.contains("index of untyped nil"), "{err}");
    let err = render_err("{{ index .status.list 5 }}", &obj);
    assert!(err.contains("out of range"), "{err}");
}

#[test]
fn map_iteration_is_sorted() {
    let obj = json!({"m": {"b": 2, "a": 1, "c": 3}});
    assert_eq!(
        render("{{ range $k, $v := .m }}{{ $k }}={{ $v }};{{ end }}", &obj),
        "a=1;b=2;c=3;"
    );
    assert_eq!(render("{{ .m }}", &obj), "map[a:1 b:2 c:3]");
}

#[test]
fn now_start_time_and_version() {
    let (clock, renderer) = sim();
    let t = renderer
        .parse("t", "{{ Now }} {{ StartTime }} kwok-{{ Version }}")
        .expect("parses");
    assert_eq!(
        t.render(&json!({})).expect("renders"),
        "2006-01-02T15:04:05Z 2006-01-02T15:04:05Z kwok-v0.7.0"
    );
    clock.advance(TimeDelta::nanoseconds(1_500_000_000));
    assert_eq!(
        t.render(&json!({})).expect("renders"),
        "2006-01-02T15:04:06.5Z 2006-01-02T15:04:05Z kwok-v0.7.0"
    );
    let err = render_err("{{ Now 1 }}", &json!({}));
    assert!(
        err.contains("wrong number of args for Now: want 0 got 1"),
        "{err}"
    );
    assert!(render_err("{{ Version \"x\" }}", &json!({})).contains("Version"));
    assert!(render_err("{{ StartTime 1 }}", &json!({})).contains("StartTime"));
}

#[test]
fn quote_matches_kwok() {
    let obj = json!({
        "s": "a \"b\" <c> & d\n",
        "i": 5,
        "f": 1.5,
        "b": true,
        "l": ["x"],
        "m": {"k": "<v>"},
        "e": "",
    });
    assert_eq!(
        render("{{ .s | Quote }}", &obj),
        r#""a \"b\" \u003cc\u003e \u0026 d\n""#
    );
    assert_eq!(render("{{ .i | Quote }}", &obj), r#""5""#);
    assert_eq!(render("{{ .f | Quote }}", &obj), r#""1.5""#);
    assert_eq!(render("{{ .b | Quote }}", &obj), r#""true""#);
    assert_eq!(render("{{ .e | Quote }}", &obj), r#""""#);
    assert_eq!(render("{{ .missing | Quote }}", &obj), r#""null""#);
    assert_eq!(render("{{ .l | Quote }}", &obj), r#""[\"x\"]""#);
    assert_eq!(
        render("{{ .m | Quote }}", &obj),
        r#""{\"k\":\"\\u003cv\\u003e\"}""#
    );
    assert_eq!(render("{{ Quote \"x\" }}", &obj), r#""x""#);
    // Quoted output reads back as the same string, whatever it holds.
    let t = sim().1.parse("t", "v: {{ .s | Quote }}").expect("parses");
    assert_eq!(t.render_json(&obj).expect("yaml")["v"], obj["s"]);
    let err = render_err("{{ Quote }}", &obj);
    assert!(
        err.contains("wrong number of args for Quote: want 1 got 0"),
        "{err}"
    );
    assert!(render_err("{{ Quote 1 2 }}", &obj).contains("Quote"));
}

#[test]
fn yaml_function_matches_kwok() {
    let obj = json!({"alloc": {"memory": "1Ti", "cpu": "1k", "pods": "110"}, "modes": ["RWO"]});
    assert_eq!(
        render("{{ YAML .alloc }}", &obj),
        "cpu: 1k\nmemory: 1Ti\npods: \"110\"\n"
    );
    assert_eq!(
        render("{{ YAML .alloc 1 }}", &obj),
        "\n  cpu: 1k\n  memory: 1Ti\n  pods: \"110\"\n  "
    );
    assert_eq!(render("{{ YAML .modes 2 }}", &obj), "\n    - RWO\n    ");
    // Zero, negative or several indents mean no padding, as in KWOK.
    assert_eq!(render("{{ YAML .modes 0 }}", &obj), "- RWO\n");
    assert_eq!(render("{{ YAML .modes -1 }}", &obj), "- RWO\n");
    assert_eq!(render("{{ YAML .modes 1 1 }}", &obj), "- RWO\n");
    assert_eq!(render("{{ YAML .missing }}", &obj), "null\n");
    // Round trip through a template, nested.
    let t = sim()
        .1
        .parse("t", "status:\n  allocatable:\n  {{ YAML .alloc 2 }}")
        .expect("parses");
    assert_eq!(
        t.render_json(&obj).expect("yaml"),
        json!({"status": {"allocatable": {"cpu": "1k", "memory": "1Ti", "pods": "110"}}})
    );
    let err = render_err("{{ YAML .alloc \"1\" }}", &obj);
    assert!(err.contains("expected int; got string"), "{err}");
    assert!(render_err("{{ YAML }}", &obj).contains("want at least 1 got 0"));
    assert!(render_err("{{ YAML .alloc 1.5 }}", &obj).contains("expected int"));
}

#[test]
fn a_yaml_indent_too_wide_is_an_error_not_gigabytes_of_spaces() {
    // Found by the template fuzz target (fuzz/regressions/template/): 4 lines padded by
    // 888,888,888 spaces each asked for 3.5 GB.
    let obj = json!({"alloc": {"memory": "1Ti", "cpu": "1k", "pods": "110"}});
    let err = render_err("{{ YAML .alloc 444444444 }}", &obj);
    assert!(
        err.contains("error calling YAML") && err.contains("indent 444444444"),
        "{err}"
    );
    let err = render_err("{{ YAML .alloc 9223372036854775807 }}", &obj);
    assert!(err.contains("error calling YAML"), "{err}");
    // A wide but reasonable indent still pads.
    assert!(
        render("{{ YAML .alloc 1000 }}", &obj).starts_with(&format!("\n{}cpu", " ".repeat(2000)))
    );
}

#[test]
fn node_conditions_are_kwoks() {
    let out = render(
        "{{ range NodeConditions }}{{ .type }}={{ .status }}/{{ .reason }};{{ end }}",
        &json!({}),
    );
    assert_eq!(
        out,
        "Ready=True/KubeletReady;MemoryPressure=False/KubeletHasSufficientMemory;\
         DiskPressure=False/KubeletHasNoDiskPressure;PIDPressure=False/KubeletHasSufficientPID;\
         NetworkUnavailable=False/RouteCreated;"
    );
    assert_eq!(render("{{ len NodeConditions }}", &json!({})), "5");
    assert!(render_err("{{ NodeConditions 1 }}", &json!({})).contains("NodeConditions"));
}

#[test]
fn node_identity_functions() {
    let obj = json!({});
    assert_eq!(
        render("{{ NodeIP }} {{ NodeName }} {{ NodePort }}", &obj),
        "10.0.0.1 kwok 10250"
    );
    let t = sim()
        .1
        .parse("t", "{{ with NodePort }}port: {{ . }}{{ end }}")
        .expect("parses");
    assert_eq!(t.render_json(&obj).expect("yaml"), json!({"port": 10250}));
    for f in ["NodeIP", "NodeName", "NodePort", "PodIP"] {
        let err = render_err(&format!("{{{{ {f} 1 }}}}"), &obj);
        assert!(
            err.contains(&format!("wrong number of args for {f}")),
            "{err}"
        );
    }
    let clock = Arc::new(ManualClock::new(start()));
    let env = StageEnv::new(clock, start(), "v").with_node_name("");
    let renderer = Renderer::new(Arc::new(env));
    assert_eq!(
        render_with(
            &renderer,
            "{{ with NodeName }}x{{ else }}none{{ end }}",
            &obj
        )
        .expect("ok"),
        "none"
    );
}

#[test]
fn ip_functions_are_stable_and_typed() {
    let (_, renderer) = sim();
    let src = concat!(
        "{{ NodeIPWith .spec.nodeName }} ",
        "{{ NodeIPsWith .spec.nodeName }} ",
        "{{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid \"\" ) ",
        "( or .metadata.name \"\" ) ( or .metadata.namespace \"\" ) }} ",
        "{{ PodIPsWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace }}"
    );
    let t = renderer.parse("t", src).expect("parses");
    let first = t.render(&pod()).expect("renders");
    assert_eq!(
        first,
        "10.1.0.1 [10.1.0.1 fd00:10:1::1] 10.244.0.1 [10.244.0.1 fd00:10:244::1]"
    );
    assert_eq!(t.render(&pod()).expect("renders"), first);
    let mut other = pod();
    other["metadata"]["uid"] = json!("u-2");
    assert_eq!(
        t.render(&other).expect("renders"),
        "10.1.0.1 [10.1.0.1 fd00:10:1::1] 10.244.0.2 [10.244.0.2 fd00:10:244::2]"
    );
    let mut host = pod();
    host["spec"]["hostNetwork"] = json!(true);
    assert!(
        t.render(&host)
            .expect("renders")
            .starts_with("10.1.0.1 [10.1.0.1 fd00:10:1::1] 10.1.0.1 [10.244.0.1 ")
    );
    // A fresh PodIP each call.
    assert_eq!(
        render_with(&renderer, "{{ PodIP }} {{ PodIP }}", &json!({})).expect("ok"),
        "10.244.0.3 10.244.0.4"
    );

    // Arguments are typed like KWOK's Go functions.
    let err = render_err("{{ NodeIPWith .spec.nodeName }}", &json!({}));
    assert!(err.contains("invalid value; expected string"), "{err}");
    let err = render_err("{{ NodeIPWith 1 }}", &json!({}));
    assert!(
        err.contains("wrong type for value; expected string; got int"),
        "{err}"
    );
    let err = render_err("{{ NodeIPsWith }}", &json!({}));
    assert!(
        err.contains("wrong number of args for NodeIPsWith: want 1 got 0"),
        "{err}"
    );
    let err = render_err(
        "{{ PodIPWith \"n\" \"false\" \"\" \"p\" \"\" }}",
        &json!({}),
    );
    assert!(err.contains("expected bool; got string"), "{err}");
    let err = render_err("{{ PodIPsWith \"n\" false \"\" \"p\" }}", &json!({}));
    assert!(
        err.contains("wrong number of args for PodIPsWith: want 5 got 4"),
        "{err}"
    );
}

#[derive(Debug)]
struct FailingEnv;

impl TemplateEnv for FailingEnv {
    fn now(&self) -> String {
        String::new()
    }
    fn start_time(&self) -> String {
        String::new()
    }
    fn version(&self) -> String {
        String::new()
    }
    fn node_name(&self) -> String {
        String::new()
    }
    fn node_port(&self) -> Value {
        Value::Null
    }
    fn node_ip(&self) -> Result<String, String> {
        Err("no node IP".to_owned())
    }
    fn pod_ip(&self) -> Result<String, String> {
        Err("pool exhausted".to_owned())
    }
    fn node_ip_with(&self, _: &str) -> Result<String, String> {
        Err("no node".to_owned())
    }
    fn node_ips_with(&self, _: &str) -> Result<Vec<String>, String> {
        Err("no node".to_owned())
    }
    fn pod_ip_with(&self, _: &super::PodIpRequest<'_>) -> Result<String, String> {
        Err("pool exhausted".to_owned())
    }
    fn pod_ips_with(&self, _: &super::PodIpRequest<'_>) -> Result<Vec<String>, String> {
        Err("pool exhausted".to_owned())
    }
    fn now_time(&self) -> DateTime<Utc> {
        start()
    }
    fn random_bytes(&self, buf: &mut [u8]) {
        buf.fill(7);
    }
}

#[test]
fn env_errors_become_template_errors() {
    let renderer = Renderer::new(Arc::new(FailingEnv));
    for (src, want) in [
        ("{{ NodeIP }}", "error calling NodeIP: no node IP"),
        ("{{ PodIP }}", "error calling PodIP: pool exhausted"),
        (
            "{{ NodeIPWith \"n\" }}",
            "error calling NodeIPWith: no node",
        ),
        (
            "{{ NodeIPsWith \"n\" }}",
            "error calling NodeIPsWith: no node",
        ),
        (
            "{{ PodIPWith \"n\" false \"\" \"p\" \"\" }}",
            "error calling PodIPWith: pool exhausted",
        ),
        (
            "{{ PodIPsWith \"n\" false \"\" \"p\" \"\" }}",
            "error calling PodIPsWith: pool exhausted",
        ),
    ] {
        let err = render_with(&renderer, src, &json!({})).expect_err(src);
        assert!(matches!(err, TemplateError::Execute { .. }), "{err:?}");
        assert!(err.to_string().contains(want), "{src}: {err}");
        assert!(err.to_string().contains("template \"t\""), "{err}");
    }
    assert_eq!(
        render_with(&renderer, "{{ NodePort }}", &json!({})).expect("ok"),
        "<no value>"
    );
}

#[test]
fn golden_placeholders() {
    let out = render_with(
        &golden(),
        concat!(
            "{{ Now }} {{ Version }} {{ NodeIP }} {{ NodeName }} {{ NodePort }} {{ PodIP }} ",
            "{{ NodeIPWith .spec.nodeName }} ",
            "{{ PodIPWith .spec.nodeName false \"\" .metadata.name \"\" }} ",
            "{{ index (NodeIPsWith \"node\") 1 }}"
        ),
        &pod(),
    )
    .expect("renders");
    assert_eq!(
        out,
        concat!(
            "<Now> <Version> <NodeIP> <NodeName> <NodePort> <PodIP> ",
            "<NodeIPWith(\"node-0\")> <PodIPWith(\"node-0\", false, \"\", \"p\", \"\")> ",
            "<1 of NodeIPsWith(\"node\")>"
        )
    );
}

#[test]
fn sprig_dict_and_default() {
    let obj = json!({"metadata": {"annotations": {"a": "x"}}, "spec": {"zero": 0}});
    assert_eq!(
        render(
            "{{ $a := or .metadata.labels dict }}{{ or (index $a \"k\") \"d\" }}",
            &obj
        ),
        "d"
    );
    assert_eq!(
        render(
            "{{ $a := or .metadata.annotations dict }}{{ index $a \"a\" }}",
            &obj
        ),
        "x"
    );
    assert_eq!(render("{{ dict \"a\" 1 \"b\" }}", &obj), "map[a:1 b:]");
    assert_eq!(render("{{ dict 1 2 }}", &obj), "map[1:2]");
    assert_eq!(render("{{ dict }}", &obj), "map[]");
    assert_eq!(
        render("{{ default \"Delete\" .spec.reclaimPolicy }}", &obj),
        "Delete"
    );
    assert_eq!(
        render("{{ default \"Delete\" \"Retain\" }}", &obj),
        "Retain"
    );
    assert_eq!(render("{{ default 5 .spec.zero }}", &obj), "5");
    assert_eq!(
        render("{{ .spec.reclaimPolicy | default \"Delete\" }}", &obj),
        "Delete"
    );
    assert_eq!(render("{{ default \"x\" }}", &obj), "x");
    assert!(render_err("{{ default }}", &obj).contains("want at least 1 got 0"));
}

#[test]
fn sprig_extras() {
    let obj = json!({"m": {"k": 1}, "l": [], "s": "<a>"});
    assert_eq!(
        render("{{ empty .l }} {{ empty .m }} {{ empty .missing }}", &obj),
        "true false true"
    );
    assert_eq!(render("{{ coalesce .missing \"\" .s }}", &obj), "<a>");
    assert_eq!(render("{{ coalesce }}", &obj), "<no value>");
    assert_eq!(render("{{ list 1 \"a\" }}", &obj), "[1 a]");
    assert_eq!(
        render(
            "{{ hasKey .m \"k\" }} {{ hasKey .m \"x\" }} {{ hasKey .missing \"k\" }}",
            &obj
        ),
        "true false false"
    );
    assert_eq!(
        render("{{ toJson .m }} {{ toJson .s }}", &obj),
        r#"{"k":1} "\u003ca\u003e""#
    );
    assert!(render_err("{{ hasKey .l \"k\" }}", &obj).contains("expected map"));
    assert!(render_err("{{ hasKey .m 1 }}", &obj).contains("expected string"));
    assert!(render_err("{{ empty }}", &obj).contains("want 1 got 0"));
    assert!(render_err("{{ toJson }}", &obj).contains("want 1 got 0"));
}

#[test]
fn render_json_reads_yaml11() {
    let (_, renderer) = sim();
    let t = renderer
        .parse(
            "t",
            "a: yes\nb: \"yes\"\nc: on\nd: 'off'\ne: ~\nf: 010\ng: {{ .n }}\nh: \"{{ .n }}\"\ni:\n",
        )
        .expect("parses");
    assert_eq!(
        t.render_json(&json!({"n": 7})).expect("yaml"),
        json!({"a": true, "b": "yes", "c": true, "d": "off", "e": null, "f": 8, "g": 7, "h": "7", "i": null})
    );
    let t = renderer.parse("t", "a: [").expect("parses");
    let err = t.render_json(&json!({})).expect_err("bad yaml");
    match &err {
        TemplateError::Yaml {
            template,
            rendered,
            error,
        } => {
            assert_eq!(template, "t");
            assert_eq!(rendered, "a: [");
            assert!(error.line().is_some(), "{error}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string()
            .starts_with("template \"t\": rendered text: invalid YAML at line 1"),
        "{err}"
    );
}

#[test]
fn kwok_pod_ready_with_sim_env_is_deterministic() {
    let src = super::golden::status_template("pod/general", "pod-ready");
    let run = || {
        let (clock, renderer) = sim();
        let t = renderer.parse("pod-ready", &src).expect("parses");
        let mut obj = pod();
        obj["status"] = json!({"containerStatuses": [{"name": "c"}]});
        let a = t.render_json(&obj).expect("renders");
        clock.advance(TimeDelta::seconds(1));
        let b = t.render_json(&obj).expect("renders");
        (a, b)
    };
    let (a, b) = run();
    assert_eq!(run(), (a.clone(), b.clone()));
    assert_eq!(a["phase"], "Running");
    assert_eq!(a["startTime"], "2006-01-02T15:04:05Z");
    assert_eq!(b["startTime"], "2006-01-02T15:04:06Z");
    assert_eq!(a["conditions"][0]["status"], "True");
    assert_eq!(a["containerStatuses"][0]["ready"], true);
    assert_eq!(a["containerStatuses"][0]["restartCount"], 0);
}

#[test]
fn functions_never_panic_on_odd_arguments() {
    let (_, renderer) = sim();
    let args = [
        "", "nil", "1", "-1", "1.5", "\"s\"", "true", ".m", ".l", "dict", "(list 1)",
    ];
    let funcs = [
        "Now",
        "StartTime",
        "Version",
        "Quote",
        "YAML",
        "NodeConditions",
        "NodeIP",
        "NodeName",
        "NodePort",
        "PodIP",
        "NodeIPWith",
        "NodeIPsWith",
        "PodIPWith",
        "PodIPsWith",
        "dict",
        "default",
        "empty",
        "coalesce",
        "list",
        "hasKey",
        "toJson",
    ];
    let obj = json!({"m": {"a": 1}, "l": [1]});
    let sprig: Vec<&str> = super::sprig::names().collect();
    for f in funcs.into_iter().chain(sprig) {
        for a in args {
            for b in args {
                let src = format!("{{{{ {f} {a} {b} }}}}");
                if let Ok(t) = renderer.parse("t", &src) {
                    let _ = t.render(&obj);
                }
            }
        }
    }
}

#[test]
fn a_render_past_16_mib_is_an_error_not_gigabytes_of_text() {
    // gotmpl bounds one printf width (65,535) and the range iterations (10 million), but
    // not their product: this asks for 600 GB.
    let src = "{{ range 10000000 }}{{ printf \"%60000d\" 1 }}{{ end }}";
    let err = render_err(src, &json!({}));
    assert!(err.contains("the output is over 16777216 bytes"), "{err}");
    // Under the bound, the same shape renders in full.
    let out = render(
        "{{ range 100 }}{{ printf \"%1000d\" 1 }}{{ end }}",
        &json!({}),
    );
    assert_eq!(out.len(), 100_000);
}
