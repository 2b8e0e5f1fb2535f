package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// The server kept the binary its runners start from (some 55 MB) in the
// data dir, one more copy for each new binary and none ever removed: a
// small volume for the store could not hold it, and upgrades piled copies
// up (issue 29). It is in the work dir now, and the copies an older
// server left, in either, are removed when no process runs them; jobs
// still start from the one installed.
func TestRunnersBinaryIsInTheWorkDir(t *testing.T) {
	s := &server{t: t, dir: t.TempDir(), work: workDir(t), addr: freeAddr(t), home: t.TempDir(), output: &syncBuffer{}}
	t.Cleanup(func() { s.end() })
	leftOver := []string{
		filepath.Join(s.dir, "bin", "ferry-00000000000000aa"),
		filepath.Join(s.work, "bin", "ferry-00000000000000bb"),
	}
	for _, p := range leftOver {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("an older ferry"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.start()

	if _, err := os.Stat(filepath.Join(s.dir, "bin")); !os.IsNotExist(err) {
		ents, _ := os.ReadDir(filepath.Join(s.dir, "bin"))
		t.Errorf("the data dir still has bin/ (%v): %v", err, ents)
	}
	copies, err := filepath.Glob(filepath.Join(s.work, "bin", "ferry-*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) != 1 || copies[0] == leftOver[1] {
		t.Fatalf("the work dir's bin/ holds %v, want the server's binary alone", copies)
	}
	if fi, err := os.Stat(filepath.Join(s.work, "bin")); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm()&0o011 != 0o011 {
		t.Errorf("the work dir's bin/ is %v: other accounts cannot pass", fi.Mode())
	}

	file := jobFile(t, "command: echo ran\n", nil)
	if r := s.ferry("job", "create", "-f", file, "--stream", "--name", "ran"); r.code != 0 {
		t.Fatalf("a job from the installed binary: %s", r)
	}
}
