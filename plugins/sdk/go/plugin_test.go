package plugin

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
)

const pod = `{"apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "web-0", "namespace": "default",
    "labels": {"app": "web", "app.kubernetes.io/name": "shop", "n": 3},
    "annotations": {"kstage.dev/x": "y"}},
  "spec": {"nodeName": null, "containers": [{"name": "c0", "ports": [{"containerPort": 8080}]}]},
  "status": {"conditions": [{"type": "Ready", "status": "True"}]}}`

func TestGet(t *testing.T) {
	obj, err := ParseObject(pod)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]any{
		"metadata.labels.app":                       "web",
		".metadata.labels.app":                      "web",
		`metadata.labels["app.kubernetes.io/name"]`: "shop",
		`.metadata["labels"]["app"]`:                "web",
		"status.conditions.0.type":                  "Ready",
		".status.conditions[0].type":                "Ready",
		"spec.containers[0].ports.0.containerPort":  json.Number("8080"),
		"spec.nodeName":                             nil,
		".metadata.labels.n":                        json.Number("3"),
	} {
		got, ok := obj.Get(path)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %#v %v, want %#v", path, got, ok, want)
		}
	}
	for _, path := range []string{"status.phase", "status.conditions.1", "status.conditions.x",
		"metadata.name.x", "a..b", "a.", `a["b`, "a[x]", "a[-1]"} {
		if got, ok := obj.Get(path); ok {
			t.Errorf("%s: found %#v", path, got)
		}
	}
	if root, ok := obj.Get("."); !ok || !reflect.DeepEqual(root, obj.Tree()) {
		t.Error(`"." is the object`)
	}
}

func TestMetadata(t *testing.T) {
	obj, _ := ParseObject(pod)
	if obj.Name() != "web-0" || obj.Namespace() != "default" {
		t.Error(obj.Name(), obj.Namespace())
	}
	if v, ok := obj.Label("app"); !ok || v != "web" {
		t.Error("label app")
	}
	if _, ok := obj.Label("n"); ok {
		t.Error("a number is no label value")
	}
	if v, ok := obj.Annotation("kstage.dev/x"); !ok || v != "y" {
		t.Error("annotation")
	}
	want := map[string]string{"app": "web", "app.kubernetes.io/name": "shop"}
	if !reflect.DeepEqual(obj.Labels(), want) {
		t.Error(obj.Labels())
	}
	empty, _ := ParseObject(`{}`)
	if empty.Labels() == nil || len(empty.Annotations()) != 0 {
		t.Error("absent maps are empty")
	}
	if _, err := ParseObject(`{"a": 1} x`); err == nil {
		t.Error("trailing data is refused")
	}
}

func TestCandidates(t *testing.T) {
	cs := Candidates{{Name: "a", Weight: 0}, {Name: "b", Weight: 2}, {Name: "c", Weight: 3}}
	if cs.TotalWeight() != 5 {
		t.Error(cs.TotalWeight())
	}
	var got []string
	for point := uint64(0); point < 6; point++ {
		got = append(got, cs.Weighted(point).Name)
	}
	if !reflect.DeepEqual(got, []string{"b", "b", "c", "c", "c", "b"}) {
		t.Error(got)
	}
	zero := Candidates{{Name: "x"}, {Name: "y"}}
	if zero.Weighted(3).Name != "y" || cs.Heaviest().Name != "c" {
		t.Error("all-zero weights index the list; heaviest")
	}
	if c, ok := cs.Find("b"); !ok || c.Weight != 2 {
		t.Error("find")
	}
	s := ChooseWithDelay(cs[1], -1)
	if s.Stage != "b" || *s.DelayMs != -1 || Choose(cs[0]).DelayMs != nil {
		t.Error("selections")
	}
}

func TestDecisions(t *testing.T) {
	if RetryAfter(5) != (Decision{Kind: DecideRetryAfter, AfterMs: 5}) || Drop(true).Kind != DecideDrop ||
		!Drop(true).Warn || Backoff().Kind != DecideBackoff || Refresh().Kind != DecideRefresh {
		t.Error("decisions")
	}
	status := uint16(409)
	f := Failure{Kind: HTTP, Status: &status}
	if !f.HasStatus(409) || f.HasStatus(404) || HTTP.String() != "http" || EOF.String() != "eof" {
		t.Error("failure helpers")
	}
}

func TestCompact(t *testing.T) {
	got, err := Compact(map[string]any{"b": "<x>", "a": json.Number("1")})
	if err != nil || got != `{"a":1,"b":"<x>"}` {
		t.Error(got, err)
	}
}

// The scanner finds what the decoded tree holds, for every path into a varied object,
// and nothing where the tree has nothing.
func TestScanAgreesWithTheTree(t *testing.T) {
	text := `{"a": {"b\"c": [1, -2.5e3, {"d": "x\\y\"z]}"}, [], {}], "e": null, "f": true,
	  "g": "\u00e9\ud83e\udd80", "h": {"": 0},
	  "q": "q\\", "r": "\\\"]", "s\\": ["\\\\"]}, "z": [[0, [1]]]}`
	obj, err := ParseObject(text)
	if err != nil {
		t.Fatal(err)
	}
	tree, _ := Decode(text)
	var walk func(v any, keys []string)
	checked := 0
	walk = func(v any, keys []string) {
		got, ok := obj.getIn(keys...)
		if !ok || !reflect.DeepEqual(got, v) {
			t.Errorf("%q: %#v %v, want %#v", keys, got, ok, v)
		}
		checked++
		for _, missing := range []string{"nope", "9", "-1", "01"} {
			want, wantOK := GetIn(tree, append(append([]string{}, keys...), missing)...)
			if got, ok := obj.getIn(append(append([]string{}, keys...), missing)...); ok != wantOK || !reflect.DeepEqual(got, want) {
				t.Errorf("%q + %q: %#v %v, want %#v %v", keys, missing, got, ok, want, wantOK)
			}
		}
		switch node := v.(type) {
		case map[string]any:
			for k, child := range node {
				walk(child, append(append([]string{}, keys...), k))
			}
		case []any:
			for i, child := range node {
				walk(child, append(append([]string{}, keys...), strconv.Itoa(i)))
			}
		}
	}
	walk(tree, nil)
	if checked < 15 {
		t.Errorf("walked %d values", checked)
	}
	for _, bad := range []string{``, `{`, `{"a": [}`, `"x`, `{"a": 1}}`} {
		if _, err := ParseObject(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}
