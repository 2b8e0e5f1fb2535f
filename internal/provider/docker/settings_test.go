package docker

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
		{name: "empty", block: nil, want: Settings{}},
		{name: "all", block: map[string]any{"type": "docker", "image": "ferry-node:bookworm", "network": "lab", "mounts": []any{"/data:/data:ro", "/scratch:/scratch"}},
			want: Settings{Image: "ferry-node:bookworm", Network: "lab", Mounts: []string{"/data:/data:ro", "/scratch:/scratch"}}},
		{name: "typo", block: map[string]any{"type": "docker", "imgae": "x"}, wantErr: "provider.imgae: unknown key; did you mean image?"},
		{name: "foreign key", block: map[string]any{"type": "docker", "program": "x"}, wantErr: "provider.program: unknown key; known keys: image, mounts, network, type"},
		{name: "image a number", block: map[string]any{"image": 3.0}, wantErr: "provider.image: must be a string, not the number 3"},
		{name: "image with space", block: map[string]any{"image": "ferry node"}, wantErr: `provider.image: "ferry node" is not an image reference`},
		{name: "host network", block: map[string]any{"network": "host"}, wantErr: `provider.network: nodes need an address of their own, which network "host" does not give`},
		{name: "mounts not a list", block: map[string]any{"mounts": "/a:/b"}, wantErr: "provider.mounts: must be a list of strings, not a string"},
		{name: "mount not a string", block: map[string]any{"mounts": []any{"/a:/b", 5.0}}, wantErr: "provider.mounts[1]: must be a string, not the number 5"},
		{name: "mount without target", block: map[string]any{"mounts": []any{"/a"}}, wantErr: `provider.mounts[0]: "/a": want HOST:CONTAINER`},
		{name: "mount relative", block: map[string]any{"mounts": []any{"a:/b"}}, wantErr: `provider.mounts[0]: "a:/b": both paths must be absolute`},
		{name: "mount option", block: map[string]any{"mounts": []any{"/a:/b:rx"}}, wantErr: `provider.mounts[0]: "/a:/b:rx": option "rx": want ro or rw`},
		{name: "mount over the node dir", block: map[string]any{"mounts": []any{"/a:" + NodeDir}}, wantErr: "provider.mounts[0]: \"/a:" + NodeDir + "\": cannot mount over"},
		{name: "mount twice", block: map[string]any{"mounts": []any{"/a:/b", "/c:/b/"}}, wantErr: `provider.mounts[1]: "/c:/b/": /b is already mounted by provider.mounts[0]`},
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
