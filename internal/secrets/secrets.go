// Package secrets keeps secrets (SSH passwords, private keys, passphrases,
// registry credentials) encrypted at rest with the workspace key, and gives
// them a type that cannot be printed, marshalled or logged by accident.
//
// A sealed value is bound to a label (for example "compute/vm1/ssh_password")
// used as AES-GCM additional data, so a ciphertext copied from one field into
// another does not open.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
)

// KeySize is the length in bytes of a workspace key (AES-256).
const KeySize = 32

// prefix marks the format of a sealed string, so a later format can be told
// apart and old values still opened.
const prefix = "fs1:"

// ErrOpen is wrapped by every failure to open a sealed value: a wrong key, a
// wrong label, a tampered or truncated value. They are deliberately not told
// apart, as AES-GCM cannot tell them apart either.
var ErrOpen = errors.New("secrets: cannot open sealed value (wrong key or label, or the value was altered)")

// Key is a workspace key. It is safe for concurrent use.
type Key struct {
	aead cipher.AEAD
	// derive keys Derive's HMAC: a key of its own, made from the
	// workspace key with HKDF, so that no key serves two algorithms.
	derive []byte
}

// NewKey makes a Key from KeySize raw bytes.
func NewKey(raw []byte) (*Key, error) {
	if len(raw) != KeySize {
		return nil, fmt.Errorf("secrets: key must be %d bytes, got %d", KeySize, len(raw))
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	derive, err := hkdf.Key(sha256.New, raw, nil, "ferry secrets: derive", sha256.Size)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	return &Key{aead: aead, derive: derive}, nil
}

// LoadOrCreateKey reads the workspace key at path, or creates it (KeySize
// random bytes, mode 0600) when the file does not exist. A key file that
// group or others can read or write is refused: whoever reads it reads every
// secret of the workspace.
func LoadOrCreateKey(path string) (*Key, error) {
	raw, err := readKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		raw, err = createKey(path)
	}
	if err != nil {
		return nil, err
	}
	return NewKey(raw)
}

func readKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secrets: key file %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("secrets: key file %s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secrets: key file %s has mode %#o, readable or writable by group or others; run chmod 600 %s", path, perm, path)
	}
	raw, err := io.ReadAll(io.LimitReader(f, KeySize+1))
	if err != nil {
		return nil, fmt.Errorf("secrets: key file %s: %w", path, err)
	}
	if len(raw) != KeySize {
		return nil, fmt.Errorf("secrets: key file %s must hold exactly %d bytes, it holds %d%s", path, KeySize, len(raw), map[bool]string{true: " or more"}[len(raw) > KeySize])
	}
	return raw, nil
}

func createKey(path string) ([]byte, error) {
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	// O_EXCL: two processes creating the key at once must not end up with
	// two different keys; the loser reads the winner's.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return readKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("secrets: create key file: %w", err)
	}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("secrets: write key file %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("secrets: write key file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("secrets: write key file %s: %w", path, err)
	}
	return raw, nil
}

// Seal encrypts plaintext bound to label and returns an opaque printable
// string: a version prefix and the base64 of nonce||ciphertext.
func (k *Key) Seal(plaintext []byte, label string) (string, error) {
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(plaintext)+k.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("secrets: %w", err)
	}
	out := k.aead.Seal(nonce, nonce, plaintext, []byte(label))
	return prefix + base64.RawStdEncoding.EncodeToString(out), nil
}

// Open decrypts a value made by Seal with the same key and label. Any
// failure wraps ErrOpen; the error never contains the sealed value.
func (k *Key) Open(sealed, label string) ([]byte, error) {
	rest, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return nil, fmt.Errorf("%w: unknown format (want prefix %q)", ErrOpen, prefix)
	}
	raw, err := base64.RawStdEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("%w: not base64", ErrOpen)
	}
	ns := k.aead.NonceSize()
	if len(raw) < ns+k.aead.Overhead() {
		return nil, fmt.Errorf("%w: too short", ErrOpen)
	}
	pt, err := k.aead.Open(nil, raw[:ns], raw[ns:], []byte(label))
	if err != nil {
		return nil, ErrOpen
	}
	return pt, nil
}

// Derive returns a secret bound to label: the same for the same key and
// label, a different one for any other, and one that tells nothing of
// the key (HMAC-SHA256, URL-safe base64). It is for secrets the server
// gives out and must know again after a restart without storing them (a
// replica's, derived from its job and attempt).
func (k *Key) Derive(label string) Secret {
	m := hmac.New(sha256.New, k.derive)
	m.Write([]byte(label))
	return Secret(base64.RawURLEncoding.EncodeToString(m.Sum(nil)))
}

// Redacted is what a Secret prints as, in every format.
const Redacted = "[secret]"

// Secret is a string that must not be shown: fmt (%v, %+v, %#v, %s, %q),
// encoding/json and log/slog all print it as Redacted. Convert it with
// s.Reveal() at the one place that needs the value. Do not use a Secret as
// a map key: encoding/json writes string-kind map keys as they are.
type Secret string

// String returns Redacted.
func (Secret) String() string { return Redacted }

// GoString returns Redacted, for %#v.
func (Secret) GoString() string { return Redacted }

// Format prints Redacted for every verb, so that %x or %d do not bypass
// String.
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(Redacted)) }

// MarshalJSON returns Redacted as a JSON string; a Secret is never sent out.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + Redacted + `"`), nil }

// MarshalText returns Redacted, for encoders that use TextMarshaler (map
// keys, YAML, XML).
func (Secret) MarshalText() ([]byte, error) { return []byte(Redacted), nil }

// LogValue returns Redacted for log/slog.
func (Secret) LogValue() slog.Value { return slog.StringValue(Redacted) }

// Reveal returns the value. It exists so that reading a secret is a
// visible, searchable act.
func (s Secret) Reveal() string { return string(s) }

var (
	_ fmt.Stringer   = Secret("")
	_ fmt.GoStringer = Secret("")
	_ fmt.Formatter  = Secret("")
	_ slog.LogValuer = Secret("")
)

// IsSealed reports whether s looks like a value made by Seal.
func IsSealed(s string) bool { return strings.HasPrefix(s, prefix) }
