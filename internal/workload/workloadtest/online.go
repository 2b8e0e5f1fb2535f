package workloadtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store/sqlite"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// Keyed is a Harness whose workspace has a workspace key, as the
// server's has: what is sealed or derived with it (online endpoints' keys
// and replicas' secrets, a kubernetes compute's kubeconfig) works. What
// the workspace logs is kept, to be searched for secrets, and it can be
// restarted.
type Keyed struct {
	*Harness
	Key *secrets.Key
	// Log is the logger whose lines Logged returns: for the workloads'
	// own, beside the workspace's.
	Log *slog.Logger

	logs *logBuffer
	cfg  workspace.Config
}

// NewKeyed is New with a workspace key.
func NewKeyed(t testing.TB, slots int) *Keyed {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := blob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := secrets.LoadOrCreateKey(filepath.Join(dir, "workspace.key"))
	if err != nil {
		t.Fatal(err)
	}
	h := &Harness{Store: st, Clock: &Clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, Target: &Target{Slots: slots}}
	k := &Keyed{Harness: h, Key: key, logs: &logBuffer{}}
	k.Log = slog.New(slog.NewTextHandler(k.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	k.cfg = workspace.Config{
		Store: st, Blobs: blobs, LogDir: filepath.Join(dir, "logs"), APIURL: "http://test",
		Targets:      func(*spec.Compute) (compute.Target, error) { return h.Target, nil },
		LeaseTimeout: 10 * time.Second, Now: h.Clock.Now, Secrets: key, Log: k.Log,
	}
	k.Restart(t)
	return k
}

// Restart makes k's WS a new workspace on the same store, blobs, logs
// and key, as a restarted server has; the old one is left as it is.
func (k *Keyed) Restart(t testing.TB) {
	t.Helper()
	ws, err := workspace.New(context.Background(), k.cfg)
	if err != nil {
		t.Fatal(err)
	}
	k.WS = ws
}

// Logged is what was logged so far.
func (k *Keyed) Logged() string { return k.logs.String() }

// PutFile stores a snapshot of one file, f.txt, holding content, as the
// owner, and returns the file's digest and the snapshot's id.
func (h *Harness) PutFile(t testing.TB, content string) (digest, snap string) {
	t.Helper()
	ctx := context.Background()
	sum := sha256.Sum256([]byte(content))
	digest = hex.EncodeToString(sum[:])
	if err := h.WS.PutBlob(ctx, Owner, digest, bytes.NewReader([]byte(content))); err != nil {
		t.Fatal(err)
	}
	m := fmt.Sprintf(`{"files":[{"path":"f.txt","mode":420,"size":%d,"sha256":%q}]}`, len(content), digest)
	snap, err := h.WS.CreateSnapshot(ctx, Owner, []byte(m))
	if err != nil {
		t.Fatal(err)
	}
	return digest, snap
}

// logBuffer is a buffer that loggers on several goroutines write to.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
