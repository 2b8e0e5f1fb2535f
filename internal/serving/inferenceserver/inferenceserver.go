// Package inferenceserver is the replica side of an online deployment:
// Ferry's inference server, a Python program (standard library only, so
// it runs in any environment a deployment names) that serves a scoring
// script written for Azure ML's inference server unchanged, embedded in
// the binary; and what a launcher needs to start one: the folder it is
// written to, its command line and environment, and the wait for it to be
// ready.
//
// The scoring contract (docs/scoring.md): the script defines init(),
// called once per worker process, and run(raw_data), called per request
// with the body as a str; GET / answers 200 once every worker's init()
// returned (liveness and readiness alike, as in Azure), POST /score
// answers run()'s value as JSON, an exception as a 500 naming it with the
// traceback on the replica's stderr. init() failing ends the process with
// a non-zero status and the traceback on stderr.
//
// The package needs nothing of Ferry's: the runner, the local target or a
// container entry point can each start a replica with it.
package inferenceserver

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// The all: prefix keeps the packages' __init__.py files, which embed
// would skip for their leading underscore.
//
//go:embed all:python
var files embed.FS

// Program is the server's entry point inside an installed folder.
const Program = "inference_server.py"

// ProbeProgram, beside Program, probes a replica from inside its
// container (GET / on --port with $FERRY_REPLICA_SECRET in SecretHeader;
// exit 0 for 2xx or 3xx): the command of an exec probe, for an
// orchestrator whose HTTP probes could carry the secret only in the
// pod's spec.
const ProbeProgram = "ferry_probe.py"

var digestOnce = sync.OnceValue(func() string {
	h := sha256.New()
	for _, p := range sources() {
		b, err := files.ReadFile(p)
		if err != nil {
			panic(err) // the embedded tree is part of the binary
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
})

// Digest is the sha256 of the embedded server (its paths and contents):
// the name of the folder Install writes it to.
func Digest() string { return digestOnce() }

// sources lists the embedded files, sorted, without Python's caches (a
// developer who ran the server from the source tree leaves some).
func sources() []string {
	var out []string
	err := fs.WalkDir(files, "python", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "__pycache__" {
			return fs.SkipDir
		}
		if !d.IsDir() && !strings.HasSuffix(p, ".pyc") {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	sort.Strings(out)
	return out
}

// Install writes the embedded server under root, in a folder named by its
// digest, unless it is there already, and returns that folder. It is safe
// for concurrent callers and processes: the files are written to a
// temporary folder renamed into place, so a folder under its final name
// is always whole.
func Install(root string) (string, error) {
	dir := filepath.Join(root, Digest())
	if _, err := os.Stat(filepath.Join(dir, Program)); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("inference server folder %s: %w", root, err)
	}
	tmp, err := os.MkdirTemp(root, ".install-")
	if err != nil {
		return "", fmt.Errorf("inference server folder %s: %w", root, err)
	}
	defer os.RemoveAll(tmp)
	for _, p := range sources() {
		b, err := files.ReadFile(p)
		if err != nil {
			return "", err
		}
		dst := filepath.Join(tmp, filepath.FromSlash(strings.TrimPrefix(p, "python/")))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", fmt.Errorf("install inference server: %w", err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return "", fmt.Errorf("install inference server: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another installer won the race: its folder is as good as ours.
		if _, statErr := os.Stat(filepath.Join(dir, Program)); statErr == nil {
			return dir, nil
		}
		return "", fmt.Errorf("install inference server in %s: %w", dir, err)
	}
	return dir, nil
}

// Files returns the embedded server's files by their path in the folder
// Install writes (slash-separated, relative): for a launcher that ships
// the server some other way than a folder on disk, a Kubernetes ConfigMap
// for one.
func Files() map[string][]byte {
	out := map[string][]byte{}
	for _, p := range sources() {
		b, err := files.ReadFile(p)
		if err != nil {
			panic(err) // the embedded tree is part of the binary
		}
		out[strings.TrimPrefix(p, "python/")] = b
	}
	return out
}
