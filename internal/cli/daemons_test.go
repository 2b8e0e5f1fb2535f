package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
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

// An --advertise-url that is no http(s) URL is refused at start, by name:
// runners, agents and the server's URL file would carry it. (A server
// that took it would serve until the context ends, and exit 0.)
func TestServerRefusesAdvertiseURLThatIsNoURL(t *testing.T) {
	var out, errb bytes.Buffer
	a := newApp(&out, &errb, envOf(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := a.run(ctx, []string{"server", "--data-dir", t.TempDir(), "--addr", "127.0.0.1:0", "--advertise-url", "10.0.0.5:8580"})
	if code != 1 || !strings.Contains(errb.String(), `--advertise-url: "10.0.0.5:8580" is not a server URL such as http://`) {
		t.Errorf("server --advertise-url 10.0.0.5:8580: exit %d\n%s%s", code, out.String(), errb.String())
	}
}
