package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Object is a Kubernetes object as kstage passed it: its JSON text, read lazily. Get,
// Label, Annotation and the rest find their value by scanning the text along the path
// and decode only that value (scan.go): a plugin reading a few fields of a large object
// pays for those fields, not for the object. Tree decodes the whole object once, on
// first use. Decoded objects (maps) are map[string]any, arrays []any, numbers
// json.Number (so integers keep every digit), and strings, booleans and null as usual.
type Object struct {
	raw     string
	tree    any
	decoded bool
}

// ParseObject takes JSON text as an Object. It checks that the text is one JSON value
// with nothing after it (its brackets and quotes balance); it decodes nothing yet.
func ParseObject(text string) (*Object, error) {
	start := skipBlanks(text, 0)
	end := valueEnd(text, start)
	if end < 0 {
		return nil, fmt.Errorf("not a JSON value")
	}
	if skipBlanks(text, end) != len(text) {
		return nil, fmt.Errorf("data after the JSON value")
	}
	return &Object{raw: text}, nil
}

// Decode decodes JSON text the way ParseObject does (numbers as json.Number).
func Decode(text string) (any, error) {
	decoder := json.NewDecoder(strings.NewReader(text))
	decoder.UseNumber()
	var tree any
	if err := decoder.Decode(&tree); err != nil {
		return nil, err
	}
	if decoder.More() {
		return nil, fmt.Errorf("data after the JSON value")
	}
	return tree, nil
}

// Raw is the JSON text the object was decoded from.
func (o *Object) Raw() string { return o.raw }

// Tree is the decoded object (usually a map[string]any), decoded on the first call.
func (o *Object) Tree() any {
	if !o.decoded {
		o.tree, _ = Decode(o.raw)
		o.decoded = true
	}
	return o.tree
}

// Get is the value at path (see the package documentation for the path syntax);
// false when the path is missing or malformed.
func (o *Object) Get(path string) (any, bool) {
	keys, err := SplitPath(path)
	if err != nil {
		return nil, false
	}
	return o.getIn(keys...)
}

// getIn is the decoded value reached by keys, scanned for in the text.
func (o *Object) getIn(keys ...string) (any, bool) {
	if o.decoded {
		return GetIn(o.tree, keys...)
	}
	raw, ok := lookupRaw(o.raw, keys)
	if !ok {
		return nil, false
	}
	value, err := Decode(raw)
	return value, err == nil
}

// GetString is the string at path; false when missing or not a string.
func (o *Object) GetString(path string) (string, bool) {
	v, ok := o.Get(path)
	s, isString := v.(string)
	return s, ok && isString
}

// Name is metadata.name ("" when absent).
func (o *Object) Name() string { return o.metadataString("name") }

// Namespace is metadata.namespace ("" when absent).
func (o *Object) Namespace() string { return o.metadataString("namespace") }

func (o *Object) metadataString(field string) string {
	v, _ := o.getIn("metadata", field)
	s, _ := v.(string)
	return s
}

// Label is the label key (metadata.labels[key]); false when absent or not a string.
func (o *Object) Label(key string) (string, bool) {
	v, ok := o.getIn("metadata", "labels", key)
	s, isString := v.(string)
	return s, ok && isString
}

// Annotation is the annotation key (metadata.annotations[key]); false when absent or
// not a string.
func (o *Object) Annotation(key string) (string, bool) {
	v, ok := o.getIn("metadata", "annotations", key)
	s, isString := v.(string)
	return s, ok && isString
}

// Labels are metadata.labels with string values (empty, never nil, when absent).
func (o *Object) Labels() map[string]string { return o.stringMap("labels") }

// Annotations are metadata.annotations with string values (empty, never nil, when
// absent).
func (o *Object) Annotations() map[string]string { return o.stringMap("annotations") }

func (o *Object) stringMap(field string) map[string]string {
	out := map[string]string{}
	v, _ := o.getIn("metadata", field)
	m, _ := v.(map[string]any)
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// SortedKeys are the keys of m in byte order.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Get is the value at path in a decoded JSON value; false when the path is missing
// or malformed.
func Get(value any, path string) (any, bool) {
	keys, err := SplitPath(path)
	if err != nil {
		return nil, false
	}
	return GetIn(value, keys...)
}

// GetIn is the value reached by keys (object keys, or decimal indexes into arrays).
func GetIn(value any, keys ...string) (any, bool) {
	for _, key := range keys {
		switch node := value.(type) {
		case map[string]any:
			next, ok := node[key]
			if !ok {
				return nil, false
			}
			value = next
		case []any:
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= len(node) || !isIndex(key) {
				return nil, false
			}
			value = node[i]
		default:
			return nil, false
		}
	}
	return value, true
}

func isIndex(key string) bool {
	for i := 0; i < len(key); i++ {
		if key[i] < '0' || key[i] > '9' {
			return false
		}
	}
	return key != ""
}

// SplitPath splits a path into its keys: `.metadata.labels.app` and
// `metadata.labels["app.kubernetes.io/name"]` (a key holding dots or brackets in
// brackets and double quotes, JSON escapes allowed), `.status.conditions.0.type` or
// `.status.conditions[0].type` for arrays. "" and "." are the value itself.
func SplitPath(path string) ([]string, error) {
	keys := []string{}
	rest := strings.TrimPrefix(path, ".")
	for rest != "" {
		switch {
		case strings.HasPrefix(rest, "[\""):
			end := closingQuote(rest, 2)
			if end < 0 || !strings.HasPrefix(rest[end+1:], "]") {
				return nil, fmt.Errorf("malformed path %q: unterminated [\"...\"]", path)
			}
			key, err := strconv.Unquote(rest[1 : end+1])
			if err != nil {
				return nil, fmt.Errorf("malformed path %q: %v", path, err)
			}
			keys = append(keys, key)
			rest = rest[end+2:]
		case strings.HasPrefix(rest, "["):
			end := strings.IndexByte(rest, ']')
			if end < 0 || !isIndex(rest[1:end]) {
				return nil, fmt.Errorf("malformed path %q: [...] holds an index or a quoted key", path)
			}
			keys = append(keys, rest[1:end])
			rest = rest[end+1:]
		default:
			end := strings.IndexAny(rest, ".[")
			if end < 0 {
				end = len(rest)
			}
			if end == 0 {
				return nil, fmt.Errorf("malformed path %q: empty key", path)
			}
			keys = append(keys, rest[:end])
			rest = rest[end:]
		}
		if strings.HasPrefix(rest, ".") {
			rest = rest[1:]
			if rest == "" {
				return nil, fmt.Errorf("malformed path %q: ends with a dot", path)
			}
		} else if rest != "" && rest[0] != '[' {
			return nil, fmt.Errorf("malformed path %q: expected '.' or '['", path)
		}
	}
	return keys, nil
}

// closingQuote is the index of the quote closing a string whose text starts at from:
// the next quote not escaped, that is not preceded by an odd run of backslashes
// (strings.IndexByte finds quotes faster than a loop over every byte).
func closingQuote(s string, from int) int {
	for i := from; i < len(s); {
		j := strings.IndexByte(s[i:], '"')
		if j < 0 {
			return -1
		}
		quote := i + j
		backslashes := 0
		for k := quote - 1; k >= from && s[k] == '\\'; k-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return quote
		}
		i = quote + 1
	}
	return -1
}

// Compact is value as compact JSON text (map keys sorted, no HTML escaping).
func Compact(value any) (string, error) {
	var out bytes.Buffer
	encoder := json.NewEncoder(&out)
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(value); err != nil {
		return "", err
	}
	return strings.TrimSuffix(out.String(), "\n"), nil
}
