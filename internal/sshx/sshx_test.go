package sshx

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/testutil"
	"golang.org/x/crypto/ssh"
)

// keyConfig logs in to s as its current user with its client key, pinned
// to its host key.
func keyConfig(s *testutil.SSHD) Config {
	return Config{
		Address:    s.Address,
		Port:       s.Port,
		User:       s.User,
		PrivateKey: s.ClientKey,
		HostKey:    HostKeyPolicy{KnownHost: s.HostKeyLine},
	}
}

func dialT(t *testing.T, cfg Config) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// assertNoSecret fails when any of the texts contains any of the secrets.
func assertNoSecret(t *testing.T, texts []string, secrets ...string) {
	t.Helper()
	for _, txt := range texts {
		for _, sec := range secrets {
			if sec != "" && strings.Contains(txt, sec) {
				t.Fatalf("a secret leaked into %q", txt)
			}
		}
	}
}

func TestKeyLoginAndRun(t *testing.T) {
	s := testutil.StartSSHD(t)
	c := dialT(t, keyConfig(s))
	ctx := context.Background()

	var out, errb bytes.Buffer
	if err := c.Run(ctx, "echo hello; echo oops >&2", &out, &errb); err != nil {
		t.Fatal(err)
	}
	if out.String() != "hello\n" || errb.String() != "oops\n" {
		t.Fatalf("stdout %q stderr %q", out.String(), errb.String())
	}

	err := c.Run(ctx, "echo failing >&2; exit 3", nil, &errb)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 3 {
		t.Fatalf("Run(exit 3) = %v, want *ExitError with Code 3", err)
	}
	if !strings.Contains(errb.String(), "failing") {
		t.Fatalf("stderr %q", errb.String())
	}

	err = c.Run(ctx, "kill -9 $$", nil, nil)
	if !errors.As(err, &ee) || ee.Signal != "KILL" || ee.Code != -1 {
		t.Fatalf("Run(kill -9) = %#v", err)
	}

	_, err = c.Output(ctx, "echo detail >&2; false")
	if !errors.As(err, &ee) || ee.Code != 1 || !strings.Contains(err.Error(), "detail") {
		t.Fatalf("Output(false) = %v", err)
	}

	// stdin reaches the command, and the shell's read takes one line only,
	// leaving the rest to the next reader.
	got, err := c.OutputInput(ctx, "IFS= read -r first; cat; echo \"<$first>\"", strings.NewReader("a secret\nrest\n"))
	if err != nil || string(got) != "rest\n<a secret>\n" {
		t.Fatalf("OutputInput = %q, %v", got, err)
	}

	if c.Fingerprint() != s.Fingerprint {
		t.Fatalf("Fingerprint() = %s, want %s", c.Fingerprint(), s.Fingerprint)
	}
	if c.HostKey() != s.HostKeyLine {
		t.Fatalf("HostKey() = %q, want %q", c.HostKey(), s.HostKeyLine)
	}
}

func TestPasswordLogin(t *testing.T) {
	s := testutil.StartSSHD(t)
	s.RequirePassword(t)
	var logBuf bytes.Buffer
	c := dialT(t, Config{
		Address:  s.Address,
		Port:     s.Port,
		User:     s.PasswordUser,
		Password: s.Password,
		HostKey:  HostKeyPolicy{Fingerprint: s.Fingerprint},
		Log:      slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	out, err := c.Output(context.Background(), "id -un")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != s.PasswordUser {
		t.Fatalf("logged in as %q, want %q", got, s.PasswordUser)
	}
	assertNoSecret(t, []string{logBuf.String()}, s.Password)
}

func TestWrongPassword(t *testing.T) {
	s := testutil.StartSSHD(t)
	s.RequirePassword(t)
	const wrong = "not-the-password-8c1f"
	var logBuf bytes.Buffer
	cfg := Config{
		Address:  s.Address,
		Port:     s.Port,
		User:     s.PasswordUser,
		Password: wrong,
		HostKey:  HostKeyPolicy{KnownHost: s.HostKeyLine},
		Log:      slog.New(slog.NewJSONHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	_, err := Dial(context.Background(), cfg)
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("Dial = %v, want ErrAuth", err)
	}
	want := fmt.Sprintf("ssh: user %s at %s: password or key refused", s.PasswordUser, s.Addr())
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
	cfg.Log.Info("config", "cfg", cfg)
	assertNoSecret(t, []string{err.Error(), fmt.Sprintf("%v %+v %#v %s %d", cfg, cfg, cfg, cfg, cfg), logBuf.String()}, wrong, s.Password)
}

func TestWrongKey(t *testing.T) {
	s := testutil.StartSSHD(t)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := keyConfig(s)
	cfg.PrivateKey = pem.EncodeToMemory(block)
	_, err = Dial(context.Background(), cfg)
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("Dial = %v, want ErrAuth", err)
	}
}

func TestEncryptedKey(t *testing.T) {
	s := testutil.StartSSHD(t)
	const passphrase = "correct horse battery 42"
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte(passphrase))
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	s.Authorize(t, string(ssh.MarshalAuthorizedKey(sshPub)))

	cfg := keyConfig(s)
	cfg.PrivateKey = pem.EncodeToMemory(block)
	cfg.Passphrase = passphrase
	dialT(t, cfg)

	var errs []string
	for _, tc := range []struct {
		name, passphrase, want string
	}{
		{"missing passphrase", "", "give its passphrase"},
		{"wrong passphrase", "wrong " + passphrase, "passphrase does not decrypt"},
	} {
		cfg.Passphrase = tc.passphrase
		_, err := Dial(context.Background(), cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Dial = %v, want ErrConfig saying %q", tc.name, err, tc.want)
		}
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	cfg.PrivateKey = []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nnot a key at all\n-----END OPENSSH PRIVATE KEY-----\n")
	cfg.Passphrase = ""
	if _, err := Dial(context.Background(), cfg); !errors.Is(err, ErrConfig) {
		t.Errorf("garbage key: Dial = %v, want ErrConfig", err)
	} else {
		errs = append(errs, err.Error())
	}
	assertNoSecret(t, errs, passphrase, "not a key at all", string(s.ClientKey[40:80]))
}

func TestHostKeyMismatch(t *testing.T) {
	s := testutil.StartSSHD(t)
	other := testutil.StartSSHD(t)

	for name, policy := range map[string]HostKeyPolicy{
		"known_hosts line": {KnownHost: other.HostKeyLine},
		"authorized_keys":  {KnownHost: strings.SplitN(other.HostKeyLine, " ", 2)[1]},
		"fingerprint":      {Fingerprint: other.Fingerprint},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := keyConfig(s)
			cfg.HostKey = policy
			_, err := Dial(context.Background(), cfg)
			if !errors.Is(err, ErrHostKeyMismatch) {
				t.Fatalf("Dial = %v, want ErrHostKeyMismatch", err)
			}
			for _, want := range []string{other.Fingerprint, s.Fingerprint, "update host_key"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

func TestHostKeyPolicyRequired(t *testing.T) {
	s := testutil.StartSSHD(t)
	for name, policy := range map[string]HostKeyPolicy{
		"none":              {},
		"pin and tofu":      {KnownHost: s.HostKeyLine, TrustOnFirstUse: true},
		"bad line":          {KnownHost: "127.0.0.1 ssh-ed25519 !!!"},
		"md5 fingerprint":   {Fingerprint: "MD5:aa:bb"},
		"line and other fp": {KnownHost: s.HostKeyLine, Fingerprint: "SHA256:xxxx"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := keyConfig(s)
			cfg.HostKey = policy
			_, err := Dial(context.Background(), cfg)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "host_key") {
				t.Fatalf("Dial = %v, want ErrConfig about host_key", err)
			}
		})
	}
}

func TestTrustOnFirstUse(t *testing.T) {
	s := testutil.StartSSHD(t)
	cfg := keyConfig(s)
	cfg.HostKey = HostKeyPolicy{TrustOnFirstUse: true}
	first := dialT(t, cfg)
	if first.Fingerprint() != s.Fingerprint {
		t.Fatalf("TOFU fingerprint %s, want %s", first.Fingerprint(), s.Fingerprint)
	}

	cfg.HostKey = HostKeyPolicy{KnownHost: first.HostKey()}
	dialT(t, cfg)
	cfg.HostKey = HostKeyPolicy{Fingerprint: first.Fingerprint()}
	dialT(t, cfg)

	// The recorded pin refuses another machine on the same address.
	other := testutil.StartSSHD(t)
	cfg = keyConfig(other)
	cfg.HostKey = HostKeyPolicy{KnownHost: first.HostKey()}
	if _, err := Dial(context.Background(), cfg); !errors.Is(err, ErrHostKeyMismatch) {
		t.Fatalf("Dial with the recorded pin to another server = %v, want ErrHostKeyMismatch", err)
	}
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	l.Close()
	_, err = Dial(context.Background(), Config{
		Address: "127.0.0.1", Port: addr.Port, User: "u", Password: "pw-unreachable-77",
		HostKey: HostKeyPolicy{TrustOnFirstUse: true},
	})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), addr.String()) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("Dial = %v, want ErrUnreachable naming %s and the dial error", err, addr)
	}
	assertNoSecret(t, []string{err.Error()}, "pw-unreachable-77")
}

func TestConfigRequired(t *testing.T) {
	base := Config{Address: "127.0.0.1", User: "u", Password: "p", HostKey: HostKeyPolicy{TrustOnFirstUse: true}}
	for name, mut := range map[string]func(*Config){
		"no address": func(c *Config) { c.Address = "" },
		"no user":    func(c *Config) { c.User = "" },
		"no secret":  func(c *Config) { c.Password = "" },
		"bad port":   func(c *Config) { c.Port = 70000 },
	} {
		cfg := base
		mut(&cfg)
		if _, err := Dial(context.Background(), cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Dial = %v, want ErrConfig", name, err)
		}
	}
}

func TestArch(t *testing.T) {
	s := testutil.StartSSHD(t)
	c := dialT(t, keyConfig(s))
	got, err := c.Arch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The server is this machine.
	if got != runtime.GOARCH {
		t.Fatalf("Arch = %s, want %s", got, runtime.GOARCH)
	}
	for m, want := range map[string]string{"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386", "ppc64le": "ppc64le"} {
		if a, ok := goarch(m); !ok || a != want {
			t.Errorf("goarch(%s) = %s, %v; want %s", m, a, ok, want)
		}
	}
	if _, ok := goarch("sparc64"); ok {
		t.Error("goarch(sparc64) accepted")
	}
}

func TestUploadAndRemoveAll(t *testing.T) {
	s := testutil.StartSSHD(t)
	c := dialT(t, keyConfig(s))
	ctx := context.Background()

	local := filepath.Join(t.TempDir(), "ferry")
	content := bytes.Repeat([]byte("ferry binary\n"), 100000)
	if err := os.WriteFile(local, content, 0o644); err != nil {
		t.Fatal(err)
	}
	remoteDir := filepath.Join(t.TempDir(), "remote")
	remote := filepath.Join(remoteDir, "bin", "ferry")
	if err := c.Upload(ctx, local, remote, 0o755); err != nil {
		t.Fatal(err)
	}
	assertFile := func(want []byte, mode os.FileMode) {
		t.Helper()
		got, err := os.ReadFile(remote)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("remote file has %d bytes, want %d", len(got), len(want))
		}
		st, err := os.Stat(remote)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Fatalf("remote mode %#o, want %#o", st.Mode().Perm(), mode)
		}
		entries, err := os.ReadDir(filepath.Dir(remote))
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 {
			t.Fatalf("remote directory holds %v, want only the file (no temporary left)", entries)
		}
	}
	assertFile(content, 0o755)
	out, err := c.Output(ctx, "head -c 12 "+remote)
	if err != nil || string(out) != "ferry binary" {
		t.Fatalf("reading the upload remotely: %q, %v", out, err)
	}

	// Replacing: the old file's inode is untouched (renamed over, not
	// rewritten), which keeps a running binary intact.
	old, err := os.Open(remote)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := os.WriteFile(local, []byte("v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Upload(ctx, local, remote, 0o700); err != nil {
		t.Fatal(err)
	}
	assertFile([]byte("v2"), 0o700)
	oldContent := make([]byte, 12)
	if _, err := old.Read(oldContent); err != nil || string(oldContent) != "ferry binary" {
		t.Fatalf("the replaced file was rewritten in place: %q, %v", oldContent, err)
	}

	// Failed uploads leave the target as it was and no temporary.
	if err := c.Upload(ctx, filepath.Join(t.TempDir(), "missing"), remote, 0o755); err == nil {
		t.Fatal("upload of a missing file succeeded")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := os.WriteFile(local, content, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Upload(cancelled, local, remote, 0o755); !errors.Is(err, context.Canceled) {
		t.Fatalf("upload with a cancelled context = %v", err)
	}
	assertFile([]byte("v2"), 0o700)

	if err := c.RemoveAll(ctx, remoteDir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(remoteDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after RemoveAll: %v", err)
	}
	if err := c.RemoveAll(ctx, remoteDir); err != nil {
		t.Fatalf("RemoveAll of a missing path: %v", err)
	}
	for _, p := range []string{"", "/", ".", "//"} {
		if err := c.RemoveAll(ctx, p); !errors.Is(err, ErrConfig) {
			t.Errorf("RemoveAll(%q) = %v, want a refusal", p, err)
		}
	}
}

func TestRunCancel(t *testing.T) {
	s := testutil.StartSSHD(t)
	c := dialT(t, keyConfig(s))
	marker := fmt.Sprintf("%d", 1000000+time.Now().UnixNano()%1000000)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, "sleep "+marker+"; echo not killed", nil, nil)
	}()
	// Wait until the command runs on the machine, then cancel.
	go func() {
		for {
			if err := c.Run(context.Background(), "pgrep -f 'sleep "+marker+"'", nil, nil); err == nil {
				close(started)
				return
			}
			pause()
		}
	}()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel = %v, want context.Canceled", err)
	}
	// The remote command is killed, not left behind.
	for {
		var ee *ExitError
		err := c.Run(context.Background(), "pgrep -f 'sleep "+marker+"'", nil, nil)
		if errors.As(err, &ee) && ee.Code == 1 {
			break
		}
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		pause()
	}
	// The connection is still usable.
	if err := c.Run(context.Background(), "true", nil, nil); err != nil {
		t.Fatal(err)
	}
}

// pause spaces out the polls of a condition on the machine; the test's
// own timeout bounds them.
func pause() { time.Sleep(20 * time.Millisecond) }

func TestReverseForward(t *testing.T) {
	s := testutil.StartSSHD(t)
	c := dialT(t, keyConfig(s))
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and /usr/bin/python3 is missing (Debian's python3 package)")
		}
		t.Skip("needs /usr/bin/python3 on the machine")
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from the server %s", r.URL.Path)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bound, err := c.ReverseForward(ctx, "127.0.0.1:0", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if bound == "" || strings.HasSuffix(bound, ":0") {
		t.Fatalf("bound = %q", bound)
	}
	py := fmt.Sprintf(`/usr/bin/python3 -c 'import urllib.request;print(urllib.request.urlopen("http://%s/x").read().decode())'`, bound)
	for i := range 3 { // several connections through one forward
		out, err := c.Output(context.Background(), py)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := strings.TrimSpace(string(out)); got != "hello from the server /x" {
			t.Fatalf("request %d: got %q", i, got)
		}
	}

	cancel()
	// Once ctx ends, the remote port is closed.
	for {
		_, err := c.Output(context.Background(), py)
		if err != nil {
			var ee *ExitError
			if !errors.As(err, &ee) {
				t.Fatal(err)
			}
			break
		}
		pause()
	}
}
