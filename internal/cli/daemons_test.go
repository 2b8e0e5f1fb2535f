package cli

import (
	"strings"
	"testing"
)

// --provider names every provider the server has, and refuses at start
// the ones that need a provider: block, saying so.
func TestServerProviderFlag(t *testing.T) {
	r := runCLI(t, nil, "server", "--help")
	for _, p := range []string{"process", "docker", "exec", "ssh"} {
		if !strings.Contains(r.stdout, p) {
			t.Errorf("server --help does not mention the %s provider:\n%s", p, r.stdout)
		}
	}
	for _, c := range []struct{ provider, want string }{
		{"exec", "--provider: exec needs settings (exec: the program; ssh: the machines) that only a compute's provider: block gives"},
		{"ssh", "--provider: ssh needs settings"},
		{"kvm", `--provider: "kvm" is not a node provider; use process or docker here, exec or ssh in a compute's provider: block`},
	} {
		r := runCLI(t, nil, "server", "--data-dir", t.TempDir(), "--provider", c.provider)
		if r.code != 1 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("--provider %s: %s\nwant %q", c.provider, r, c.want)
		}
	}
}

// The listener's and the gateway's limits that cannot be used are refused
// at start, naming their flag.
func TestServerLimitFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--endpoint-max-body", "0"}, `--endpoint-max-body: "0" is not a size such as 64KiB`},
		{[]string{"--max-header-bytes", "lots"}, `--max-header-bytes: "lots" is not a size`},
		{[]string{"--endpoint-max-buffered", "8MiB"}, "--endpoint-max-buffered (8MiB) ≥ --endpoint-max-buffered-per-addr (32MiB) ≥ --endpoint-max-body (16MiB) must hold"},
		{[]string{"--endpoint-max-requests", "0"}, "--endpoint-max-requests must be at least 1"},
		{[]string{"--max-headers", "-3"}, "--max-headers must be at least 1"},
	} {
		r := runCLI(t, nil, append([]string{"server", "--data-dir", t.TempDir()}, c.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: %s\nwant %q", c.args, r, c.want)
		}
	}
}
