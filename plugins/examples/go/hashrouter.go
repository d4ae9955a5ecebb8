// Package hashrouter is hash-router, a kstage selector plugin written in Go.
//
// It spreads objects over the candidate Stages by a hash of a key taken from each
// object, so the same object always goes the same way (sticky, unlike kstage's random
// weighted choice), in proportion to the candidates' weights:
//
//   - the key is `namespace/name`, or what the annotation kstage.dev/hash-by asks for:
//     `labels` (every label, sorted, as `k=v` joined by commas) or a path into the
//     object (a string value as is; a number or boolean as its JSON text);
//   - the hash is 64-bit FNV-1a of the key; the candidate is Candidates.Weighted(hash);
//   - the annotation kstage.dev/jitter-ms (an integer N >= 0) sets the delay to the
//     candidate's own delay (0 without one) plus (hash >> 32) mod (N + 1); without it
//     kstage keeps the delay it drew.
package hashrouter

import (
	"encoding/json"
	"hash/fnv"
	"strconv"
	"strings"

	"kstage.dev/plugin"
)

const (
	// HashByAnnotation names the key: `labels` or a path into the object.
	HashByAnnotation = "kstage.dev/hash-by"
	// JitterAnnotation spreads the delay over 0..N milliseconds.
	JitterAnnotation = "kstage.dev/jitter-ms"
)

func init() {
	plugin.Register(plugin.Plugin{Name: "hash-router", Version: "0.1.0", Select: Select})
}

// Select is the selector: see the package documentation.
func Select(obj *plugin.Object, candidates plugin.Candidates) (*plugin.Selection, error) {
	key, err := Key(obj)
	if err != nil {
		return nil, err
	}
	hash := Hash(key)
	chosen := candidates.Weighted(hash)
	jitter, ok := obj.Annotation(JitterAnnotation)
	if !ok {
		return plugin.Choose(chosen), nil
	}
	span, err := strconv.ParseInt(strings.TrimSpace(jitter), 10, 64)
	if err != nil || span < 0 {
		return nil, plugin.Errorf("annotation %s: %q is not a non-negative integer (milliseconds)", JitterAnnotation, jitter)
	}
	var base int64
	if chosen.DelayMs != nil {
		base = *chosen.DelayMs
	}
	return plugin.ChooseWithDelay(chosen, base+int64((hash>>32)%(uint64(span)+1))), nil
}

// Key is the text hashed for obj.
func Key(obj *plugin.Object) (string, error) {
	by, ok := obj.Annotation(HashByAnnotation)
	switch {
	case !ok:
		return obj.Namespace() + "/" + obj.Name(), nil
	case by == "labels":
		labels := obj.Labels()
		var key strings.Builder
		for i, k := range plugin.SortedKeys(labels) {
			if i > 0 {
				key.WriteByte(',')
			}
			key.WriteString(k)
			key.WriteByte('=')
			key.WriteString(labels[k])
		}
		return key.String(), nil
	}
	if _, err := plugin.SplitPath(by); err != nil {
		return "", plugin.Errorf("annotation %s: %v", HashByAnnotation, err)
	}
	value, found := obj.Get(by)
	switch v := value.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return strconv.FormatBool(v), nil
	case nil:
		if !found {
			return "", plugin.Errorf("annotation %s: %s is not in the object", HashByAnnotation, by)
		}
	}
	return "", plugin.Errorf("annotation %s: %s holds no string, number or boolean", HashByAnnotation, by)
}

// Hash is 64-bit FNV-1a.
func Hash(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return h.Sum64()
}
