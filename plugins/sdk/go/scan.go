package plugin

import (
	"encoding/json"
	"strconv"
	"strings"
)

// A scanner over JSON text that finds the value at a path without decoding the rest:
// a selector that reads two labels of a 60 KB object skips the other 60 KB instead of
// building a tree of them (encoding/json's decoding dominates a Go plugin's call
// otherwise). The text is the one kstage passed, which is valid JSON; the scanner still
// fails safely (not found) on text that is not.

// valueEnd is the index just past the JSON value starting at i (after blanks), or -1.
func valueEnd(s string, i int) int {
	i = skipBlanks(s, i)
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"':
		end := closingQuote(s, i+1)
		if end < 0 {
			return -1
		}
		return end + 1
	case '{', '[':
		return containerEnd(s, i)
	default:
		j := i
		for j < len(s) && !endsLiteral(s[j]) {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}

// containerEnd is the index just past the object or array opening at i, or -1.
func containerEnd(s string, i int) int {
	depth := 0
	for ; i < len(s); i++ {
		switch s[i] {
		case '"':
			end := closingQuote(s, i+1)
			if end < 0 {
				return -1
			}
			i = end
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// endsLiteral says whether c ends a number, true, false or null.
func endsLiteral(c byte) bool {
	switch c {
	case ' ', '\t', '\r', '\n', ',', ':', ']', '}':
		return true
	}
	return false
}

func skipBlanks(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// lookupRaw is the text of the value reached by keys, as GetIn finds it in the decoded
// tree. It scans only what lies before each key on the way, and stops at the first
// member with the key (kstage sends no object with a key twice).
func lookupRaw(s string, keys []string) (string, bool) {
	start := skipBlanks(s, 0)
	for _, key := range keys {
		var ok bool
		if start >= len(s) {
			return "", false
		}
		switch s[start] {
		case '{':
			start, ok = member(s, start, key)
		case '[':
			start, ok = element(s, start, key)
		}
		if !ok {
			return "", false
		}
	}
	end := valueEnd(s, start)
	if end < 0 {
		return "", false
	}
	return s[start:end], true
}

// member is where the value of key starts in the object opening at i.
func member(s string, i int, key string) (int, bool) {
	i = skipBlanks(s, i+1)
	for i < len(s) && s[i] != '}' {
		keyEnd := valueEnd(s, i)
		if keyEnd < 0 || s[i] != '"' {
			return 0, false
		}
		colon := skipBlanks(s, keyEnd)
		if colon >= len(s) || s[colon] != ':' {
			return 0, false
		}
		start := skipBlanks(s, colon+1)
		if keyIs(s[i:keyEnd], key) {
			return start, true
		}
		if i = afterValue(s, start); i < 0 {
			return 0, false
		}
	}
	return 0, false
}

// afterValue is where the next member or element starts after the value at i (past
// its comma), or the closing bracket; -1 when the value does not end.
func afterValue(s string, i int) int {
	end := valueEnd(s, i)
	if end < 0 {
		return -1
	}
	i = skipBlanks(s, end)
	if i < len(s) && s[i] == ',' {
		i = skipBlanks(s, i+1)
	}
	return i
}

// element is where element number key starts in the array opening at i.
func element(s string, i int, key string) (int, bool) {
	n, err := strconv.Atoi(key)
	if err != nil || !isIndex(key) {
		return 0, false
	}
	i = skipBlanks(s, i+1)
	for index := 0; i < len(s) && s[i] != ']'; index++ {
		if index == n {
			return i, true
		}
		if i = afterValue(s, i); i < 0 {
			return 0, false
		}
	}
	return 0, false
}

// keyIs says whether the quoted JSON string quoted is key.
func keyIs(quoted, key string) bool {
	body := quoted[1 : len(quoted)-1]
	if !strings.ContainsRune(body, '\\') {
		return body == key
	}
	var decoded string
	return json.Unmarshal([]byte(quoted), &decoded) == nil && decoded == key
}
