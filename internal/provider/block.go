package provider

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// A compute's provider: block arrives as decoded YAML or JSON
// (map[string]any). Each provider package parses it into typed settings of
// its own with the helpers below, so that every provider refuses unknown
// keys and wrong types the same way, naming the field ("provider.image")
// and, for a misspelt key, the nearest one it knows.

// Field is the path of a value inside a provider block, for error
// messages: "provider", "provider.mounts[1]", "provider.hosts[0].port".
type Field string

// Root is the field of the provider block itself.
const Root Field = "provider"

// Key is the field of key k inside f.
func (f Field) Key(k string) Field { return Field(string(f) + "." + k) }

// Index is the field of element i of the list f.
func (f Field) Index(i int) Field { return Field(fmt.Sprintf("%s[%d]", f, i)) }

// Errorf returns an error that starts with the field.
func (f Field) Errorf(format string, args ...any) error {
	return fmt.Errorf("%s: %s", f, fmt.Sprintf(format, args...))
}

// CheckKeys refuses a key of m that is not in known, naming it and, when
// one is close, the known key it was probably meant to be. Keys are checked
// in sorted order so the error is the same on every run.
func CheckKeys(f Field, m map[string]any, known ...string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if slices.Contains(known, k) {
			continue
		}
		if s := Nearest(k, known); s != "" {
			return f.Key(k).Errorf("unknown key; did you mean %s?", s)
		}
		sorted := slices.Clone(known)
		sort.Strings(sorted)
		return f.Key(k).Errorf("unknown key; known keys: %s", strings.Join(sorted, ", "))
	}
	return nil
}

// Nearest is the word of words closest to w by edit distance, or "" when
// none is close enough to be a likely misspelling (at most a third of the
// longer word's letters differ, and never more than 3).
func Nearest(w string, words []string) string {
	best, bestD := "", math.MaxInt
	lw := strings.ToLower(w)
	for _, c := range words {
		d := editDistance(lw, strings.ToLower(c))
		limit := min(3, max(1, max(len(w), len(c))/3))
		if d <= limit && (d < bestD || d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Damerau (optimal string alignment) distance: a
// swapped pair of letters ("imgae") counts as one edit.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// String returns m[k] as a string: "" when the key is absent, an error
// naming the field when it is there and not a string.
func String(f Field, m map[string]any, k string) (string, error) {
	v, ok := m[k]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", f.Key(k).Errorf("must be a string, not %s", typeName(v))
	}
	return s, nil
}

// Strings returns m[k] as a list of strings: nil when the key is absent, an
// error naming the element when one is not a string.
func Strings(f Field, m map[string]any, k string) ([]string, error) {
	v, ok := m[k]
	if !ok || v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, f.Key(k).Errorf("must be a list of strings, not %s", typeName(v))
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, f.Key(k).Index(i).Errorf("must be a string, not %s", typeName(e))
		}
		out = append(out, s)
	}
	return out, nil
}

// Map returns m[k] as a map: nil when the key is absent, an error naming
// the field when it is there and not a map.
func Map(f Field, m map[string]any, k string) (map[string]any, error) {
	v, ok := m[k]
	if !ok || v == nil {
		return nil, nil
	}
	mm, ok := v.(map[string]any)
	if !ok {
		return nil, f.Key(k).Errorf("must be a map of keys and values, not %s", typeName(v))
	}
	return mm, nil
}

// Int returns v as a whole number, accepting what YAML (int) and JSON
// (float64) decoders give for one.
func Int(f Field, v any) (int, error) {
	switch n := v.(type) {
	case int:
		return n, nil
	case int64:
		if n >= math.MinInt32 && n <= math.MaxInt32 {
			return int(n), nil
		}
	case uint64:
		if n <= math.MaxInt32 {
			return int(n), nil
		}
	case float64:
		if n == math.Trunc(n) && n >= math.MinInt32 && n <= math.MaxInt32 {
			return int(n), nil
		}
	}
	return 0, f.Errorf("must be a whole number, not %s", typeName(v))
}

// typeName says what a decoded value is, in the file's terms.
func typeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "empty"
	case string:
		_ = x
		return "a string"
	case bool:
		return "a boolean"
	case int, int64, uint64, float64:
		return fmt.Sprintf("the number %v", x)
	case []any:
		return "a list"
	case map[string]any:
		return "a map"
	}
	return fmt.Sprintf("a %T", v)
}
