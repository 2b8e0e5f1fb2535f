package snapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// secretTree makes, beside an attempt's folder, a "data dir" holding the
// same names as the job's outputs, each with secret content, and returns
// the attempt folder (base), the outputs folder and the data dir.
func secretTree(t *testing.T, files int) (base, outputs, data string) {
	t.Helper()
	top := t.TempDir()
	base, data = filepath.Join(top, "attempt"), filepath.Join(top, "data")
	outputs = filepath.Join(base, "wd", "outputs")
	for _, d := range []string{filepath.Join(outputs, "sub", "deeper"), filepath.Join(data, "deeper")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range files {
		name := fmt.Sprintf("f%02d", i)
		for _, w := range []struct{ dir, content string }{
			{filepath.Join(outputs, "sub"), "output " + name},
			{filepath.Join(outputs, "sub", "deeper"), "output " + name},
			{data, "SECRET " + name},
			{filepath.Join(data, "deeper"), "SECRET " + name},
		} {
			if err := os.WriteFile(filepath.Join(w.dir, name), []byte(w.content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	return base, outputs, data
}

// TestOutputUploadRaceReadsNoSecret is the attack of issue 29 on the
// output upload: while the runner walks and reads a job's outputs, another
// process of the job's account swaps a folder of them with a symlink to
// the data dir, over and over. Whatever the walk and the reads meet, no
// file of the data dir is planned, streamed or hashed: a swapped folder
// only makes files be skipped as unreadable.
func TestOutputUploadRaceReadsNoSecret(t *testing.T) {
	base, outputs, data := secretTree(t, 60)
	defer testutil.SwapWithLink(t, filepath.Join(outputs, "sub"), data)()
	var kept, skipped int
	for round := range 40 {
		p, err := PlanOutputsUnder(base, "wd/outputs", OutputOptions{})
		if err != nil {
			t.Fatalf("round %d: plan: %v", round, err)
		}
		sent, _, content := streamPlan(t, p)
		for path, c := range content {
			if strings.Contains(c, "SECRET") {
				t.Fatalf("round %d: the stream holds %s with the data dir's content %q", round, path, c)
			}
		}
		ob, err := p.Build()
		if err != nil {
			t.Fatalf("round %d: build: %v", round, err)
		}
		for digest, data := range ob.Data {
			if strings.Contains(string(data), "SECRET") {
				t.Fatalf("round %d: the build kept %s with the data dir's content", round, digest)
			}
		}
		kept += sent.Files
		skipped += len(sent.Skipped) + sent.SkippedMore
	}
	if skipped == 0 {
		t.Errorf("no entry met a swapped folder in 40 rounds (%d files kept): the race was not run", kept)
	}
	t.Logf("40 rounds: %d files sent, %d entries skipped", kept, skipped)
}

// TestPlanOutputsUnderRefusesALinkedRoot: the output folder itself (or a
// folder on the way to it beneath the trusted base) put in place as a
// symlink fails the plan; it is not followed.
func TestPlanOutputsUnderRefusesALinkedRoot(t *testing.T) {
	for _, linked := range []string{"wd", "wd/outputs"} {
		base, _, data := secretTree(t, 2)
		at := filepath.Join(base, linked)
		if err := os.RemoveAll(at); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(data, at); err != nil {
			t.Fatal(err)
		}
		if _, err := PlanOutputsUnder(base, "wd/outputs", OutputOptions{}); !errors.Is(err, syscall.ELOOP) {
			t.Errorf("%s a symlink: plan: %v, want ELOOP", linked, err)
		}
	}
}

// TestOutputsKeepLinksThatStayInside: a symlink within the outputs is
// still kept with its target's content (by the path the walk resolved),
// one by absolute path to a file inside too; links that leave by "..", by
// an absolute path, or through another link are skipped with the reason.
func TestOutputsKeepLinksThatStayInside(t *testing.T) {
	base, outputs, data := secretTree(t, 1)
	links := map[string]string{
		"in-rel":       "sub/f00",
		"in-abs":       filepath.Join(outputs, "sub", "deeper", "f00"),
		"dir-in":       "sub",
		"chain":        "in-rel",
		"sub/up":       "../sub/deeper/f00",
		"out-abs":      filepath.Join(data, "f00"),
		"out-rel":      "../../../data/f00",
		"out-via-link": "dir-out/f00",
		"dir-out":      data,
	}
	for at, target := range links {
		if err := os.Symlink(target, filepath.Join(outputs, at)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := PlanOutputsUnder(base, "wd/outputs", OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, content := streamPlan(t, p)
	for _, want := range []string{"in-rel", "in-abs", "dir-in/f00", "dir-in/deeper/f00", "chain", "sub/up"} {
		if c := content[want]; c != "output f00" {
			t.Errorf("%s = %q, want the output it links to", want, c)
		}
	}
	why := map[string]string{}
	for _, s := range p.Skipped {
		why[s.Path] = s.Reason
	}
	for _, out := range []string{"out-abs", "out-rel", "out-via-link", "dir-out"} {
		if _, ok := content[out]; ok {
			t.Errorf("%s was kept", out)
		}
		if !strings.Contains(why[out], "outside the directory") {
			t.Errorf("%s skipped for %q, want outside the directory", out, why[out])
		}
	}
}
