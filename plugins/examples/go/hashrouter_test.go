package hashrouter

import (
	"strings"
	"testing"

	"kstage.dev/plugin"
)

func object(t *testing.T, text string) *plugin.Object {
	t.Helper()
	obj, err := plugin.ParseObject(text)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

func TestHashIsFNV1a(t *testing.T) {
	// The published FNV-1a 64 values of "" and "a".
	if Hash("") != 0xcbf29ce484222325 || Hash("a") != 0xaf63dc4c8601ec8c {
		t.Fatalf("%x %x", Hash(""), Hash("a"))
	}
}

func TestKeys(t *testing.T) {
	for _, c := range []struct{ object, key, err string }{
		{`{"metadata": {"name": "web-0", "namespace": "ns"}}`, "ns/web-0", ""},
		{`{"metadata": {"name": "n", "labels": {"b": "2", "a": "1", "c": 3},
		  "annotations": {"kstage.dev/hash-by": "labels"}}}`, "a=1,b=2", ""},
		{`{"spec": {"nodeName": "node-7"}, "metadata": {"annotations": {"kstage.dev/hash-by": ".spec.nodeName"}}}`, "node-7", ""},
		{`{"spec": {"replicas": 30}, "metadata": {"annotations": {"kstage.dev/hash-by": "spec.replicas"}}}`, "30", ""},
		{`{"metadata": {"annotations": {"kstage.dev/hash-by": "spec.nodeName"}}}`, "", "is not in the object"},
		{`{"spec": {}, "metadata": {"annotations": {"kstage.dev/hash-by": "spec"}}}`, "", "no string"},
		{`{"metadata": {"annotations": {"kstage.dev/hash-by": "spec..x"}}}`, "", "malformed path"},
	} {
		key, err := Key(object(t, c.object))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.object, err, c.err)
			}
			continue
		}
		if err != nil || key != c.key {
			t.Errorf("%s: key %q (%v), want %q", c.object, key, err, c.key)
		}
	}
}

func TestJitter(t *testing.T) {
	delay := int64(100)
	candidates := plugin.Candidates{{Name: "a", Weight: 1, DelayMs: &delay}}
	obj := object(t, `{"metadata": {"name": "x", "annotations": {"kstage.dev/jitter-ms": "50"}}}`)
	got, err := Select(obj, candidates)
	if err != nil {
		t.Fatal(err)
	}
	want := 100 + int64((Hash("/x")>>32)%51)
	if got.Stage != "a" || got.DelayMs == nil || *got.DelayMs != want {
		t.Fatalf("%+v, want delay %d", got, want)
	}
	bad := object(t, `{"metadata": {"annotations": {"kstage.dev/jitter-ms": "-1"}}}`)
	if _, err := Select(bad, candidates); err == nil {
		t.Fatal("a negative jitter is refused")
	}
}
