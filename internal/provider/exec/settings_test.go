package exec

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSettings(t *testing.T) {
	for _, c := range []struct {
		name    string
		block   map[string]any
		want    Settings
		wantErr string
	}{
		{name: "program", block: map[string]any{"type": "exec", "program": "/opt/site/machines"}, want: Settings{Program: "/opt/site/machines"}},
		{name: "args", block: map[string]any{"type": "exec", "program": "gcloud-nodes", "args": []any{"--zone", "eu"}},
			want: Settings{Program: "gcloud-nodes", Args: []string{"--zone", "eu"}}},
		{name: "no program", block: map[string]any{"type": "exec"}, wantErr: "provider.program: an exec provider needs the program"},
		{name: "blank program", block: map[string]any{"program": "  "}, wantErr: "provider.program: an exec provider needs the program"},
		{name: "typo", block: map[string]any{"progam": "x"}, wantErr: "provider.progam: unknown key; did you mean program?"},
		{name: "args typo", block: map[string]any{"program": "x", "arg": []any{}}, wantErr: "provider.arg: unknown key; did you mean args?"},
		{name: "program a list", block: map[string]any{"program": []any{"x"}}, wantErr: "provider.program: must be a string, not a list"},
		{name: "arg a number", block: map[string]any{"program": "x", "args": []any{"a", 1.0}}, wantErr: "provider.args[1]: must be a string, not the number 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseSettings(c.block)
			if c.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one starting %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("settings (-want +got):\n%s", d)
			}
		})
	}
}
