package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/spec"
)

// The registry names every provider type, and check sends a block to the
// provider its type names (or the server's default), so each provider's
// own keys are the ones accepted.
func TestProviderCheck(t *testing.T) {
	p := newProviders("/bin/true", t.TempDir(), "")
	docker := newProviders("/bin/true", t.TempDir(), "docker")
	cluster := func(block map[string]any) *spec.Compute {
		return &spec.Compute{Name: "c", Type: "amlcompute", Size: "Standard_DS1_v2", Provider: block}
	}
	for _, c := range []struct {
		name    string
		p       *providers
		c       *spec.Compute
		wantErr string // "" = accepted
	}{
		{name: "no block", p: p, c: cluster(nil)},
		{name: "process", p: p, c: cluster(map[string]any{"type": "process"})},
		{name: "docker", p: p, c: cluster(map[string]any{"type": "docker", "image": "ferry-node:bookworm"})},
		{name: "exec", p: p, c: cluster(map[string]any{"type": "exec", "program": "x"})},
		{name: "ssh", p: p, c: cluster(map[string]any{"type": "ssh", "hosts": []any{"a"}, "ssh_settings": map[string]any{"admin_password": "p"}})},
		{name: "unknown type", p: p, c: cluster(map[string]any{"type": "dockr"}),
			wantErr: `provider.type: unknown provider "dockr"; known: docker, exec, process, ssh`},
		{name: "type a number", p: p, c: cluster(map[string]any{"type": 3.0}),
			wantErr: "provider.type: must be the name of a node provider; known: docker, exec, process, ssh"},
		{name: "docker typo", p: p, c: cluster(map[string]any{"type": "docker", "imgae": "x"}), wantErr: "provider.imgae: unknown key; did you mean image?"},
		// Without type:, the block is read by the server's default.
		{name: "default process refuses image", p: p, c: cluster(map[string]any{"image": "x"}), wantErr: "provider.image: unknown key; known keys: type"},
		{name: "default docker takes image", p: docker, c: cluster(map[string]any{"image": "x"})},
		{name: "default docker typo", p: docker, c: cluster(map[string]any{"imgae": "x"}), wantErr: "provider.imgae: unknown key; did you mean image?"},
		{name: "exec needs a program", p: p, c: cluster(map[string]any{"type": "exec"}), wantErr: "provider.program: an exec provider needs the program"},
		// An attached machine has no block; its settings are its own fields.
		{name: "virtualmachine", p: p, c: &spec.Compute{Name: "vm", Type: "virtualmachine"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.p.check(c.c)
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), c.wantErr) {
				t.Fatalf("error %v, want one starting %q", err, c.wantErr)
			}
		})
	}
}

// The factory makes no provider of a block check refuses.
func TestFactoryRefusesWhatCheckRefuses(t *testing.T) {
	p := newProviders("/bin/true", t.TempDir(), "")
	_, err := p.factory()(&spec.Compute{Name: "c", Type: "amlcompute", Provider: map[string]any{"type": "exec", "program": "x", "arg": []any{}}})
	if err == nil || !strings.HasPrefix(err.Error(), "provider.arg: unknown key; did you mean args?") {
		t.Fatalf("factory: %v", err)
	}
	if len(p.made) != 0 {
		t.Errorf("a provider was made of a refused block: %v", p.made)
	}
}

// A provider block comes from users over the API as JSON: whatever it
// holds, checking it does not panic, a refusal names a field of the block,
// and no value under ssh_settings (passwords, keys) appears in the error.
func FuzzProviderCheck(f *testing.F) {
	for _, s := range []string{
		`{"type":"docker","imgae":"x"}`,
		`{"type":"docker","image":"a b","network":"host","mounts":["/a:/b:ro","/c:/b",5]}`,
		`{"type":"exec","program":"x","args":["a",1]}`,
		`{"type":"ssh","hosts":["a",{"address":"b","port":2222,"host_key":"TOFU"},{"port":1e99}],"ssh_settings":{"admin_password":"hunter2hunter2"}}`,
		`{"type":"ssh","hosts":[{"adress":"b"}],"ssh_settings":{"admin_pasword":"hunter2hunter2"}}`,
		`{"type":"process"}`, `{"type":3}`, `{"type":null}`, `{}`, `{"mounts":{"a":[]}}`,
	} {
		f.Add([]byte(s))
	}
	p := newProviders("/bin/true", f.TempDir(), "")
	f.Fuzz(func(t *testing.T, data []byte) {
		var block map[string]any
		if json.Unmarshal(data, &block) != nil {
			return
		}
		err := p.check(&spec.Compute{Name: "c", Type: "amlcompute", Provider: block})
		if err == nil {
			return
		}
		if !strings.HasPrefix(err.Error(), "provider.") {
			t.Errorf("the error names no field of the block: %v", err)
		}
		if s, ok := block["ssh_settings"].(map[string]any); ok && block["type"] == "ssh" {
			for k, v := range s {
				if str, ok := v.(string); ok && len(str) >= 8 && strings.Contains(err.Error(), str) {
					t.Errorf("the error quotes ssh_settings.%s: %v", k, err)
				}
			}
		}
	})
}
