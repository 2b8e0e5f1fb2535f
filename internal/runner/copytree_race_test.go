package runner

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// TestCopyTreeRaceCopiesNoSecret: a download-mode input's datastore folder
// has a subfolder that someone swaps with a symlink to a secret folder
// (renameat2 RENAME_EXCHANGE, in a loop) while the runner copies it: no
// copy holds the secret, whatever moment each read meets.
func TestCopyTreeRaceCopiesNoSecret(t *testing.T) {
	top := t.TempDir()
	src, secret := filepath.Join(top, "store"), filepath.Join(top, "secret")
	for _, d := range []string{filepath.Join(src, "sub"), secret} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 {
		name := "f" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		os.WriteFile(filepath.Join(src, "sub", name), []byte("data"), 0o644)
		os.WriteFile(filepath.Join(secret, name), []byte("SECRET"), 0o644)
	}
	defer testutil.SwapWithLink(t, filepath.Join(src, "sub"), secret)()
	okCheck := func(string, fs.FileInfo) error { return nil }
	copied, failed := 0, 0
	for round := range 60 {
		dest := filepath.Join(top, "copy", string(rune('a'+round%26))+string(rune('a'+round/26)))
		if _, err := copyTree(src, dest, okCheck, io.Discard, "input"); err != nil {
			failed++ // a swapped folder met mid-copy fails the copy; it never leads it out
		}
		err := filepath.Walk(dest, func(p string, fi fs.FileInfo, err error) error {
			if err != nil || fi.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if strings.Contains(string(b), "SECRET") {
				t.Fatalf("round %d copied the secret into %s", round, p)
			}
			copied++
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if failed == 0 {
		t.Errorf("no copy met a swapped folder in 60 rounds (%d files copied): the race was not run", copied)
	}
	t.Logf("%d files copied, %d copies met a swapped folder and failed", copied, failed)
}
