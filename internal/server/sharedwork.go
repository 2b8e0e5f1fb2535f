package server

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// A work dir under sharedWorkRoot is named by a hash of its data dir, so
// nothing there says whose it is, and one whose data dir was deleted (a
// workspace in a temporary folder, a test's) would stay forever. Each one
// therefore records its data dir in dataDirRecord, and a server starting
// on that root removes the work dirs whose data dir is gone and that no
// live process still works in: their jobs could never report to anyone.

// dataDirRecord, in a shared work dir, holds the path of its data dir.
const dataDirRecord = ".data-dir"

// recordDataDir writes the data dir into a work dir under root.
func recordDataDir(work, dataDir string) error {
	if err := os.WriteFile(filepath.Join(work, dataDirRecord), []byte(dataDir+"\n"), 0o600); err != nil {
		return fmt.Errorf("work dir %s: record its data dir: %w", work, err)
	}
	return nil
}

// pruneSharedWorkDirs removes the work dirs under root, other than keep,
// whose recorded data dir no longer exists and in which no process runs
// (by command line or current directory). A work dir without a record (an
// older server's) is left alone: nothing says it is abandoned. It returns
// the work dirs it removed.
func pruneSharedWorkDirs(root, keep string, log *slog.Logger) []string {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var removed []string
	var busy []string // filled on first need: reading /proc is not free
	busyRead := false
	for _, e := range ents {
		dir := filepath.Join(root, e.Name())
		if !e.IsDir() || dir == keep {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, dataDirRecord))
		if err != nil {
			continue
		}
		data := strings.TrimSpace(string(b))
		if _, err := os.Stat(data); data == "" || !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if !busyRead {
			busy, busyRead = processPlaces(), true
		}
		if inUse(dir, busy) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("could not remove an abandoned work dir", "dir", dir, "data_dir", data, "err", err)
			continue
		}
		log.Info("removed the work dir of a data dir that is gone", "dir", dir, "data_dir", data)
		removed = append(removed, dir)
	}
	return removed
}

// processPlaces lists, for every live process, its command line and its
// current directory: where it could be working.
func processPlaces() []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		p := filepath.Join("/proc", e.Name())
		if b, err := os.ReadFile(filepath.Join(p, "cmdline")); err == nil {
			out = append(out, strings.ReplaceAll(string(b), "\x00", " "))
		}
		if cwd, err := os.Readlink(filepath.Join(p, "cwd")); err == nil {
			out = append(out, cwd+"/")
		}
	}
	return out
}

// inUse says whether any of places mentions a path in dir.
func inUse(dir string, places []string) bool {
	for _, p := range places {
		if strings.Contains(p, dir+"/") || strings.HasSuffix(p, dir) || strings.Contains(p, dir+" ") {
			return true
		}
	}
	return false
}
