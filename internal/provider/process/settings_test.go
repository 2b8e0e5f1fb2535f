package process

import (
	"strings"
	"testing"
)

func TestParseSettings(t *testing.T) {
	for _, c := range []struct {
		name    string
		block   map[string]any
		wantErr string
	}{
		{name: "absent", block: nil},
		{name: "type only", block: map[string]any{"type": "process"}},
		{name: "a docker key", block: map[string]any{"type": "process", "image": "x"}, wantErr: "provider.image: unknown key; known keys: type"},
		{name: "typo of type", block: map[string]any{"tpye": "process"}, wantErr: "provider.tpye: unknown key; did you mean type?"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSettings(c.block)
			if c.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if c.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), c.wantErr)) {
				t.Fatalf("error %v, want one starting %q", err, c.wantErr)
			}
		})
	}
}
