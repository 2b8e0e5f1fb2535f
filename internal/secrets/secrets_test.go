package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func newKey(t *testing.T) (*Key, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "workspace.key")
	k, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	return k, path
}

func TestRoundTrip(t *testing.T) {
	k, _ := newKey(t)
	for _, pt := range [][]byte{nil, []byte("hunter2"), bytes.Repeat([]byte{0, 1, 2, 255}, 5000)} {
		sealed, err := k.Seal(pt, "compute/vm1/ssh_password")
		if err != nil {
			t.Fatal(err)
		}
		if len(pt) > 0 && strings.Contains(sealed, string(pt)) {
			t.Fatalf("sealed value contains the plaintext")
		}
		got, err := k.Open(sealed, "compute/vm1/ssh_password")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, pt) {
			t.Fatalf("round trip: got %d bytes, want %d", len(got), len(pt))
		}
	}
}

func TestSealIsRandomized(t *testing.T) {
	k, _ := newKey(t)
	a, _ := k.Seal([]byte("same"), "l")
	b, _ := k.Seal([]byte("same"), "l")
	if a == b {
		t.Fatal("two seals of the same plaintext are equal: the nonce is not random")
	}
}

func TestKeyPersists(t *testing.T) {
	k, path := newKey(t)
	sealed, err := k.Seal([]byte("s3cret"), "l")
	if err != nil {
		t.Fatal(err)
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := k2.Open(sealed, "l")
	if err != nil || string(got) != "s3cret" {
		t.Fatalf("reloaded key: got %q, %v", got, err)
	}
}

func TestOpenFailures(t *testing.T) {
	k, _ := newKey(t)
	other, _ := newKey(t)
	sealed, err := k.Seal([]byte("hunter2"), "compute/vm1/ssh_password")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.RawStdEncoding.DecodeString(strings.TrimPrefix(sealed, prefix))
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) string {
		b := bytes.Clone(raw)
		b[i] ^= 1
		return prefix + base64.RawStdEncoding.EncodeToString(b)
	}
	cases := []struct {
		name, sealed, label string
		key                 *Key
	}{
		{"wrong label", sealed, "compute/vm1/ssh_passphrase", k},
		{"empty label", sealed, "", k},
		{"wrong key", sealed, "compute/vm1/ssh_password", other},
		{"flipped nonce", flip(0), "compute/vm1/ssh_password", k},
		{"flipped ciphertext", flip(len(raw) / 2), "compute/vm1/ssh_password", k},
		{"flipped tag", flip(len(raw) - 1), "compute/vm1/ssh_password", k},
		{"truncated", sealed[:len(sealed)-4], "compute/vm1/ssh_password", k},
		{"too short", prefix + "AAAA", "compute/vm1/ssh_password", k},
		{"no prefix", strings.TrimPrefix(sealed, prefix), "compute/vm1/ssh_password", k},
		{"not base64", prefix + "!!!", "compute/vm1/ssh_password", k},
		{"empty", "", "compute/vm1/ssh_password", k},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.key.Open(c.sealed, c.label)
			if !errors.Is(err, ErrOpen) {
				t.Fatalf("Open = %q, %v; want ErrOpen", got, err)
			}
			if strings.Contains(err.Error(), "hunter2") || (len(c.sealed) > 8 && strings.Contains(err.Error(), c.sealed)) {
				t.Fatalf("error leaks the value: %v", err)
			}
		})
	}
}

func TestKeyFileMode(t *testing.T) {
	_, path := newKey(t)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("new key file mode = %#o, want 0600", st.Mode().Perm())
	}
	if st.Size() != KeySize {
		t.Fatalf("key file size = %d, want %d", st.Size(), KeySize)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660, 0o644, 0o602} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := LoadOrCreateKey(path)
		if err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("mode %#o: err = %v, want a refusal that says chmod 600", mode, err)
		}
	}
	for _, mode := range []os.FileMode{0o400, 0o600} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreateKey(path); err != nil {
			t.Fatalf("mode %#o: %v", mode, err)
		}
	}
}

func TestKeyFileBadContents(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string][]byte{
		"short": make([]byte, KeySize-1),
		"long":  make([]byte, KeySize+1),
		"empty": nil,
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreateKey(path); err == nil {
			t.Errorf("%s key file accepted", name)
		}
	}
	if _, err := LoadOrCreateKey(dir); err == nil {
		t.Error("a directory accepted as a key file")
	}
	if _, err := LoadOrCreateKey(filepath.Join(dir, "missing", "key")); err == nil {
		t.Error("key created in a missing directory")
	}
}

func TestSecretNeverPrinted(t *testing.T) {
	const pw = "hunter2-very-secret"
	s := Secret(pw)
	type creds struct {
		User     string
		Password Secret
		Ptr      *Secret
	}
	c := creds{User: "alice", Password: s, Ptr: &s}

	var out []string
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10s", "%T"} {
		out = append(out, fmt.Sprintf(f, s), fmt.Sprintf(f, c), fmt.Sprintf(f, &c), fmt.Sprintf(f, []Secret{s}), fmt.Sprintf(f, map[string]Secret{"k": s}))
	}
	out = append(out, fmt.Sprint(s), fmt.Sprintln(s, c), fmt.Sprint(*c.Ptr))

	for _, v := range []any{s, c, &c, map[string]Secret{"k": s}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}

	var buf bytes.Buffer
	for _, h := range []slog.Handler{slog.NewTextHandler(&buf, nil), slog.NewJSONHandler(&buf, nil)} {
		log := slog.New(h)
		log.Info("connect", "password", s, "creds", c, "ptr", &s)
		log.Info("connect", slog.Any("password", s), slog.Group("g", "p", s))
		log.With("password", s).Info("with")
	}
	out = append(out, buf.String())

	joined := strings.Join(out, "\n")
	if strings.Contains(joined, pw) || strings.Contains(joined, fmt.Sprintf("%x", pw)) {
		t.Fatalf("a Secret leaked:\n%s", joined)
	}
	if !strings.Contains(buf.String(), Redacted) {
		t.Fatalf("log does not show %s:\n%s", Redacted, buf.String())
	}
	if s.Reveal() != pw || string(s) != pw {
		t.Fatal("Reveal does not return the value")
	}
}

func TestSecretUnmarshalJSON(t *testing.T) {
	var c struct{ Password Secret }
	if err := json.Unmarshal([]byte(`{"Password":"hunter2"}`), &c); err != nil {
		t.Fatal(err)
	}
	if c.Password.Reveal() != "hunter2" {
		t.Fatalf("unmarshal: got %d bytes", len(c.Password))
	}
}

// Derive gives the same secret for a key and label after the key is read
// again (a restarted server knows its replicas' secrets), another one for
// another label or key, and nothing of the key itself.
func TestDerive(t *testing.T) {
	k, path := newKey(t)
	a := k.Derive("replica/j1/1").Reveal()
	again, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if b := again.Derive("replica/j1/1").Reveal(); a != b || len(a) < 40 {
		t.Fatalf("derived twice from one key: %q and %q, want one secret of 32 bytes", a, b)
	}
	other, _ := newKey(t)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{
		"another label": k.Derive("replica/j1/2").Reveal(),
		"another key":   other.Derive("replica/j1/1").Reveal(),
	} {
		if s == a {
			t.Errorf("%s derives the same secret", what)
		}
	}
	for _, enc := range []string{base64.RawURLEncoding.EncodeToString(raw), base64.StdEncoding.EncodeToString(raw), fmt.Sprintf("%x", raw)} {
		if strings.Contains(a, enc[:16]) {
			t.Fatal("the derived secret holds the key")
		}
	}
}
