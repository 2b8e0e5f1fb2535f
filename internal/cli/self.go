package cli

import (
	"os"
	"path/filepath"
	"strings"
)

// goRunCommand is how a user who ran `go run ./cmd/ferry` runs ferry again.
const goRunCommand = "go run ./cmd/ferry"

// selfCommand is how the user runs this ferry again, for the commands that
// messages suggest: "ferry" when it was found on the PATH, the path it was
// started by otherwise (./ferry), and `go run ./cmd/ferry` when it is a
// temporary `go run` build, which is gone once it ends and is not on the
// PATH. exe is the running executable, argv0 what started it, tmp
// os.TempDir() and gocache the Go build cache.
func selfCommand(exe, argv0, tmp, gocache string) string {
	if isGoRunBuild(exe, tmp, gocache) {
		return goRunCommand
	}
	if !strings.Contains(argv0, "/") {
		return "ferry"
	}
	return argv0
}

// isGoRunBuild says whether exe is a binary that `go run` built: in a
// go-build* folder of tmp (TMPDIR/go-build123/b001/exe/ferry), or in the
// build cache, where newer Go versions keep them.
func isGoRunBuild(exe, tmp, gocache string) bool {
	if exe == "" {
		return false
	}
	if gocache != "" && within(exe, gocache) {
		return true
	}
	rel, err := filepath.Rel(tmp, exe)
	if err != nil || !filepath.IsLocal(rel) {
		return false
	}
	first, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
	return strings.HasPrefix(first, "go-build")
}

// within says whether path is inside dir.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && filepath.IsLocal(rel)
}

// goCache is the Go build cache's folder, as `go env GOCACHE` would say,
// without running go.
func goCache(getenv func(string) string) string {
	if c := getenv("GOCACHE"); c != "" {
		return c
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "go-build")
}

// buildHint says how to make a ferry to keep, when this one is a `go run`
// build; "" otherwise.
func (a *app) buildHint() string {
	if a.self != goRunCommand {
		return ""
	}
	return "this ferry is a temporary `go run` build; `go build -o ferry ./cmd/ferry` makes one to keep (then `./ferry ...`, or put it on your PATH)"
}
