package runner

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// outputsTree makes an attempt folder as a root runner has it: the folder
// 0711, root's; wd/outputs the job's (uid), holding a file the job wrote
// and a hard link to a file only root may read (a "data dir" beside the
// attempt, on the same file system).
func outputsTree(t *testing.T, uid, gid int) (attempt, secret string) {
	t.Helper()
	top := t.TempDir()
	for d := top; d != "/"; d = filepath.Dir(d) {
		if d == os.TempDir() {
			break
		}
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	attempt = filepath.Join(top, "attempt")
	outputs := filepath.Join(attempt, "wd", "outputs")
	if err := os.MkdirAll(outputs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(attempt, 0o711); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(top, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	secret = filepath.Join(data, "owner.token")
	if err := os.WriteFile(secret, []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outputs, "model.txt"), []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A kernel with protected_hardlinks=0 lets a job link a file it cannot
	// read; root makes the link here to stand for that.
	if err := os.Link(secret, filepath.Join(outputs, "stolen")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(attempt, "wd"), outputs, filepath.Join(outputs, "model.txt")} {
		if err := os.Lchown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return attempt, secret
}

// TestOutputsAreReadAsTheJobsAccount: a root runner reads a job's
// outputs through a process of the job's account, so a hard link to a
// file only root may read is skipped as unreadable, while the job's own
// files are sent. The runner's own read (as root) would have sent it.
func TestOutputsAreReadAsTheJobsAccount(t *testing.T) {
	testutil.RequireRoot(t)
	const uid, gid = 65534, 65534
	attempt, _ := outputsTree(t, uid, gid)
	opt := snapshot.OutputOptions{}
	src, err := readOutputsAs(&syscall.Credential{Uid: uid, Gid: gid}, attempt, "wd/outputs", "outputs", opt)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if src.Len() != 2 {
		t.Fatalf("the plan has %d files, want 2 (model.txt and the link, which is only found unreadable when read)", src.Len())
	}
	got := streamed(t, src)
	if got["model.txt"] != "weights" {
		t.Errorf("model.txt = %q, want weights", got["model.txt"])
	}
	if _, ok := got["stolen"]; ok {
		t.Errorf("the hard link to root's file was sent: %q", got["stolen"])
	}
	// Each upload try reads the folder again, in a process of its own.
	again := streamed(t, src)
	if again["model.txt"] != "weights" || len(again) != 1 {
		t.Errorf("the second read sent %v", again)
	}

	// What the account cannot read is said, as for any unreadable file.
	var b bytes.Buffer
	sent, err := src.WriteStream(&b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sent.Skipped) != 1 || sent.Skipped[0].Path != "stolen" || !strings.Contains(sent.Skipped[0].Reason, "permission denied") {
		t.Errorf("skipped = %+v, want stolen: permission denied", sent.Skipped)
	}

	// The same folder read by root in process sends the secret: the
	// account's rights are what keep it out.
	p, err := snapshot.PlanOutputsUnder(attempt, "wd/outputs", opt)
	if err != nil {
		t.Fatal(err)
	}
	if got := streamed(t, p); got["stolen"] != "SECRET" {
		t.Fatalf("root's own read did not reach the linked file (%v): the test proves nothing", got)
	}
}

// TestOutputsReaderRefusesRoot: the reader will not run as root, and a
// folder the account cannot reach fails the plan with the reason.
func TestOutputsReaderRefusesRoot(t *testing.T) {
	testutil.RequireRoot(t)
	attempt, _ := outputsTree(t, 65534, 65534)
	if _, err := readOutputsAs(&syscall.Credential{Uid: 0, Gid: 0}, attempt, "wd/outputs", "outputs", snapshot.OutputOptions{}); err == nil || !strings.Contains(err.Error(), "will not read a job's outputs as root") {
		t.Errorf("reading as root: %v", err)
	}
	if err := os.Chmod(attempt, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := readOutputsAs(&syscall.Credential{Uid: 65534, Gid: 65534}, attempt, "wd/outputs", "outputs", snapshot.OutputOptions{}); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("reading a folder the account cannot reach: %v, want permission denied", err)
	}
}

// streamed writes src's stream and reads it back, content by path.
func streamed(t *testing.T, src snapshot.OutputSource) map[string]string {
	t.Helper()
	var b bytes.Buffer
	if _, err := src.WriteStream(&b, nil); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	sr := snapshot.NewStreamReader(&b, snapshot.StreamLimits{})
	for {
		f, r, err := sr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		out[f.Path] = string(data)
	}
}
