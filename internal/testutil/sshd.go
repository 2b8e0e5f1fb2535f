package testutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// sshdPath is where Debian's openssh-server puts the daemon; sshd re-execs
// itself and so must be started by an absolute path.
const sshdPath = "/usr/sbin/sshd"

// PasswordUser is the local account that StartSSHD gives a password, for
// password-login tests. It is made once per machine, only when the tests
// run as root.
const PasswordUser = "ferrytest"

// SSHD is a real OpenSSH server on a loopback port, private to one test.
type SSHD struct {
	Address string // "127.0.0.1"
	Port    int
	// User is the current user, who logs in with ClientKey.
	User string
	// ClientKey is an unencrypted OpenSSH private key (PEM) that User's
	// authorized_keys accepts.
	ClientKey []byte
	// PasswordUser and Password log in by password; both are empty when
	// the tests do not run as root (see RequirePassword).
	PasswordUser string
	Password     string
	// HostKeyLine is the server's host key as a known_hosts line for
	// Address, and Fingerprint its SHA256 fingerprint as ssh-keygen -l
	// prints it.
	HostKeyLine string
	Fingerprint string
	// Dir is the server's private directory (config, keys, log).
	Dir string

	authorizedKeys string
	env            []string // set in every session besides HOME
	log            SyncBuffer
	stopOnce       sync.Once
	stopFn         func()
}

// Addr returns "Address:Port".
func (s *SSHD) Addr() string { return net.JoinHostPort(s.Address, strconv.Itoa(s.Port)) }

// Log returns what sshd wrote to its stderr so far.
func (s *SSHD) Log() string { return s.log.String() }

// Authorize adds an authorized_keys line (a public key) for every user of
// this server; sshd reads the file at each login.
func (s *SSHD) Authorize(t testing.TB, line string) {
	t.Helper()
	f, err := os.OpenFile(s.authorizedKeys, os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, strings.TrimSpace(line)); err != nil {
		t.Fatal(err)
	}
}

// RequirePassword skips the test unless this server has a password user
// (it has one when the tests run as root).
func (s *SSHD) RequirePassword(t testing.TB) {
	t.Helper()
	if s.PasswordUser == "" {
		skip(t, "password login needs a local user with a password; run the tests as root so StartSSHD can make %q", PasswordUser)
	}
}

// RequireSSHD skips the test unless OpenSSH's sshd is installed.
func RequireSSHD(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(sshdPath); err != nil {
		skip(t, "needs OpenSSH's server at %s (apt-get install openssh-server)", sshdPath)
	}
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		skip(t, "needs ssh-keygen (apt-get install openssh-client)")
	}
}

// StartSSHD starts a private OpenSSH server on a free loopback port with a
// fresh host key and a fresh client key, and stops it when the test ends.
// It skips the test when sshd is missing (fails under CI=true).
func StartSSHD(t testing.TB) *SSHD {
	t.Helper()
	return StartSSHDEnv(t)
}

// StartSSHDEnv is StartSSHD with env (NAME=value, no spaces) set in every
// session, as a login node's profile would set it: a test cluster's
// SLURM_CONF, for instance.
func StartSSHDEnv(t testing.TB, env ...string) *SSHD {
	t.Helper()
	RequireSSHD(t)
	for _, e := range env {
		if !strings.Contains(e, "=") || strings.ContainsAny(e, " \t\n\"") {
			t.Fatalf("StartSSHDEnv: %q is not NAME=value without spaces or quotes", e)
		}
	}
	// sshd refuses to start without its privilege separation directory,
	// which systemd would otherwise make.
	if os.Geteuid() == 0 {
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	s := &SSHD{Address: "127.0.0.1", Dir: dir, authorizedKeys: filepath.Join(dir, "authorized_keys"), env: env}

	hostKey := filepath.Join(dir, "host_ed25519")
	clientKey := filepath.Join(dir, "client_ed25519")
	for _, k := range []string{hostKey, clientKey} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ferry-test", "-f", k).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, out)
		}
	}
	var err error
	if s.ClientKey, err = os.ReadFile(clientKey); err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(clientKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	// sshd reads authorized_keys as the user logging in, who may be the
	// test user: the file (public keys only) and the path to it are
	// readable by all.
	if err := os.WriteFile(s.authorizedKeys, pub, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hostPub, err := os.ReadFile(hostKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(hostPub))
	if len(fields) < 2 {
		t.Fatalf("ssh-keygen wrote an odd public key: %q", hostPub)
	}
	out, err := exec.Command("ssh-keygen", "-l", "-E", "sha256", "-f", hostKey+".pub").Output()
	if err != nil {
		t.Fatalf("ssh-keygen -l: %v", err)
	}
	if f := strings.Fields(string(out)); len(f) >= 2 {
		s.Fingerprint = f[1]
	}

	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	s.User = u.Username
	if os.Geteuid() == 0 {
		s.PasswordUser = PasswordUser
		s.Password = ensurePasswordUser(t)
	}

	// A free port can be taken between our probe and sshd's bind, so try
	// a few.
	var lastErr error
	for range 5 {
		s.Port = freePort(t)
		if lastErr = s.start(t); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("start sshd: %v\n%s", lastErr, s.Log())
	}
	host := s.Address
	if s.Port != 22 {
		host = fmt.Sprintf("[%s]:%d", s.Address, s.Port)
	}
	s.HostKeyLine = host + " " + fields[0] + " " + fields[1]
	return s
}

func (s *SSHD) start(t testing.TB) error {
	t.Helper()
	config := filepath.Join(s.Dir, "sshd_config")
	cfg := fmt.Sprintf(`ListenAddress 127.0.0.1
Port %d
PidFile %s
HostKey %s
AuthorizedKeysFile %s
StrictModes no
UsePAM no
PasswordAuthentication yes
KbdInteractiveAuthentication no
PermitRootLogin yes
AllowTcpForwarding yes
Subsystem sftp internal-sftp
LogLevel VERBOSE
SetEnv HOME=%s
`, s.Port, filepath.Join(s.Dir, "sshd.pid"), filepath.Join(s.Dir, "host_ed25519"), s.authorizedKeys, strings.Join(append([]string{s.home()}, s.env...), " "))
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		return err
	}
	cmd := exec.Command(sshdPath, "-D", "-e", "-f", config)
	cmd.Stdout = &s.log
	cmd.Stderr = &s.log
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-exited:
			return fmt.Errorf("sshd exited: %v", err)
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("sshd did not answer on its port")
		case <-time.After(20 * time.Millisecond):
		}
	}
	s.stopFn = func() {
		// SIGTERM makes sshd -D close its listener; sessions it forked
		// are separate processes and end when their clients close.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("sshd log:\n%s", s.Log())
		}
	})
	return nil
}

// home is the HOME of sessions on this server: a directory of its own, so
// that a login runs none of the host account's shell profile (this host's
// root profile runs pyenv rehash, which waits 60 s on a lock that any shell
// killed mid-rehash leaves). Files still land in the account's real home
// (the passwd entry), where SFTP starts.
func (s *SSHD) home() string {
	h := filepath.Join(s.Dir, "home")
	_ = os.MkdirAll(h, 0o777)
	_ = os.Chmod(h, 0o777)
	return h
}

// Stop stops the server: new connections are refused from then on.
// Sessions it already forked go on until their clients close them.
func (s *SSHD) Stop() { s.stopOnce.Do(s.stopFn) }

// ChangeHostKey gives the server a new host key, as a reinstalled machine
// would have, and returns its known_hosts line. sshd reads it at SIGHUP.
func (s *SSHD) ChangeHostKey(t testing.TB) string {
	t.Helper()
	hostKey := filepath.Join(s.Dir, "host_ed25519")
	os.Remove(hostKey)
	os.Remove(hostKey + ".pub")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ferry-test", "-f", hostKey).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(hostKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(s.Dir, "sshd.pid"))
	if err != nil {
		t.Fatalf("sshd pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("sshd pid file: %q", raw)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatalf("SIGHUP sshd: %v", err)
	}
	fields := strings.Fields(string(pub))
	line := fmt.Sprintf("[%s]:%d %s %s", s.Address, s.Port, fields[0], fields[1])
	// sshd re-executes itself at SIGHUP; wait until it answers with the new key.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := exec.Command("ssh-keyscan", "-p", strconv.Itoa(s.Port), "-t", "ed25519", s.Address).Output()
		if strings.Contains(string(out), fields[1]) {
			s.HostKeyLine = line
			return line
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("sshd did not take its new host key")
	return ""
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ensurePasswordUser makes PasswordUser with a random password once per
// machine and returns the password. Test processes of several packages run
// at once, so the password is kept in a root-only file and the whole
// check-and-make runs under an exclusive file lock; otherwise one process
// would change the password under another's feet.
func ensurePasswordUser(t testing.TB) string {
	t.Helper()
	// One place per machine, whatever TMPDIR a test process has (the e2e
	// tests set their own): two places would mean two passwords.
	dir := "/tmp/ferry-sshd"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	pwFile := filepath.Join(dir, PasswordUser+".password")
	if _, err := user.Lookup(PasswordUser); err != nil {
		if out, err := exec.Command("useradd", "-m", "-s", "/bin/sh", PasswordUser).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v\n%s", PasswordUser, err, out)
		}
	}
	// The kept password is set again each time (the same one, so a test
	// process that read it before keeps a working password): the account's
	// password may have been changed since it was kept.
	pw := ""
	if b, err := os.ReadFile(pwFile); err == nil && len(b) > 0 {
		pw = string(b)
	} else {
		b := make([]byte, 12)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		pw = "pw-" + hex.EncodeToString(b)
	}
	cmd := exec.Command("chpasswd")
	cmd.Stdin = strings.NewReader(PasswordUser + ":" + pw + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chpasswd %s: %v\n%s", PasswordUser, err, out)
	}
	if err := os.WriteFile(pwFile, []byte(pw), 0o600); err != nil {
		t.Fatal(err)
	}
	return pw
}

// RestartSSHD starts a new server on the port, keys and users of old,
// which must be stopped, as a machine that comes back would.
func RestartSSHD(t testing.TB, old *SSHD) *SSHD {
	t.Helper()
	old.Stop()
	s := &SSHD{Address: old.Address, Port: old.Port, User: old.User, ClientKey: old.ClientKey,
		PasswordUser: old.PasswordUser, Password: old.Password, HostKeyLine: old.HostKeyLine,
		Fingerprint: old.Fingerprint, Dir: old.Dir, authorizedKeys: old.authorizedKeys, env: old.env}
	var err error
	for range 50 { // the old listener may take a moment to go
		if err = s.start(t); err == nil {
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("restart sshd on port %d: %v\n%s", s.Port, err, s.Log())
	return nil
}
