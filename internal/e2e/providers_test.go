package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A provider block is read by its provider when the compute is created: a
// misspelt key, an unknown provider type or a value of the wrong type is
// refused with the field named (and the key meant, where one is near), the
// API answers 400, and nothing is stored.
func TestProviderBlockRefusals(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	const head = "type: amlcompute\nsize: Standard_DS1_v2\nmax_instances: 1\n"
	for name, c := range map[string]struct{ block, want string }{
		"typo":    {"provider: {type: docker, imgae: x}\n", "provider.imgae: unknown key; did you mean image?"},
		"dockr":   {"provider: {type: dockr}\n", `provider.type: unknown provider "dockr"; known: docker, exec, process, ssh`},
		"mount":   {"provider: {type: docker, mounts: [/tmp:/data, 5]}\n", "provider.mounts[1]: must be a string"},
		"process": {"provider: {type: process, program: x}\n", "provider.program: unknown key"},
		"noprog":  {"provider: {type: exec, args: [a]}\n", "provider.program: an exec provider needs the program"},
		"sshport": {"provider: {type: ssh, hosts: [{address: h, prot: 22}], ssh_settings: {admin_password: p}}\n", "provider.hosts[0].prot: unknown key; did you mean port?"},
	} {
		p := filepath.Join(dir, name+".yml")
		if err := os.WriteFile(p, []byte("name: "+name+"\n"+head+c.block), 0o644); err != nil {
			t.Fatal(err)
		}
		r := s.ferry("compute", "create", "-f", p)
		if r.code == 0 {
			t.Errorf("%s: %q was taken", name, c.block)
		}
		mustContain(t, name, r.stderr, c.want)
		if r := s.ferry("compute", "show", name); r.code == 0 {
			t.Errorf("%s: the refused compute was stored: %s", name, r.stdout)
		}
	}

	body, err := json.Marshal(map[string]any{"name": "api-typo", "type": "amlcompute", "size": "Standard_DS1_v2",
		"provider": map[string]any{"type": "docker", "imgae": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	code, resp := s.call("POST", "/v1/computes", s.token, body)
	if code != 400 || !strings.Contains(string(resp), "provider.imgae: unknown key; did you mean image?") {
		t.Errorf("POST /v1/computes with provider.imgae: %d %s, want 400 naming the key", code, resp)
	}
}
