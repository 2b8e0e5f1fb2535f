package provider

import (
	"testing"
)

func TestNearest(t *testing.T) {
	known := []string{"type", "image", "network", "mounts"}
	for _, c := range []struct{ in, want string }{
		{"imgae", "image"},    // swapped letters
		{"img", ""},           // too far from image
		{"Image", "image"},    // case
		{"netwrk", "network"}, // a letter missing
		{"mount", "mounts"},
		{"typ", "type"},
		{"program", ""},
		{"", ""},
	} {
		if got := Nearest(c.in, known); got != c.want {
			t.Errorf("Nearest(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestCheckKeys(t *testing.T) {
	for _, c := range []struct {
		name string
		m    map[string]any
		want string // "" = no error
	}{
		{"known", map[string]any{"type": "docker", "image": "x"}, ""},
		{"empty", nil, ""},
		{"near", map[string]any{"imgae": "x"}, "provider.imgae: unknown key; did you mean image?"},
		{"far", map[string]any{"colour": "x"}, "provider.colour: unknown key; known keys: image, network, type"},
		// Sorted: the same key is named on every run.
		{"first of two", map[string]any{"zz": 1, "aa": 1}, "provider.aa: unknown key; known keys: image, network, type"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckKeys(Root, c.m, "type", "image", "network")
			if got := errString(err); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestValues(t *testing.T) {
	m := map[string]any{"s": "v", "n": 3.0, "l": []any{"a", 2}, "ls": []any{"a", "b"}, "m": map[string]any{}, "nil": nil}
	if s, err := String(Root, m, "s"); err != nil || s != "v" {
		t.Errorf("String(s) = %q, %v", s, err)
	}
	if s, err := String(Root, m, "absent"); err != nil || s != "" {
		t.Errorf("String(absent) = %q, %v", s, err)
	}
	if s, err := String(Root, m, "nil"); err != nil || s != "" {
		t.Errorf("String(nil) = %q, %v", s, err)
	}
	if _, err := String(Root, m, "n"); errString(err) != "provider.n: must be a string, not the number 3" {
		t.Errorf("String(n): %v", err)
	}
	if _, err := Strings(Root, m, "l"); errString(err) != "provider.l[1]: must be a string, not the number 2" {
		t.Errorf("Strings(l): %v", err)
	}
	if _, err := Strings(Root, m, "s"); errString(err) != "provider.s: must be a list of strings, not a string" {
		t.Errorf("Strings(s): %v", err)
	}
	if l, err := Strings(Root, m, "ls"); err != nil || len(l) != 2 {
		t.Errorf("Strings(ls) = %q, %v", l, err)
	}
	if _, err := Map(Root, m, "l"); errString(err) != "provider.l: must be a map of keys and values, not a list" {
		t.Errorf("Map(l): %v", err)
	}
	for _, v := range []any{22, int64(22), uint64(22), 22.0} {
		if n, err := Int("f", v); err != nil || n != 22 {
			t.Errorf("Int(%T 22) = %d, %v", v, n, err)
		}
	}
	for _, v := range []any{22.5, "22", true, 1e300, uint64(1 << 40)} {
		if _, err := Int("f", v); err == nil {
			t.Errorf("Int(%T %v) took it", v, v)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
