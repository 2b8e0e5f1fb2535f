package inferenceserver

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// bootID is this kernel's boot id: a random id per boot, the same for
// every process and container on one machine, different on every other.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// OnThisHost reports whether the replica that wrote s listens on a Unix
// socket this process can reach: it runs on the same kernel (its boot id
// is ours), and the path it named is, seen from here, the very socket it
// bound (same device and inode), in a folder no account but its owner
// may enter. A replica on another machine fails the first test; one in a
// container whose folder is not mounted at the same path here, a path
// that here names some other file, or a socket another account could
// replace, fails the second. Whether the path merely exists says neither.
func (s Status) OnThisHost() bool {
	return s.onHost(bootID())
}

func (s Status) onHost(boot string) bool {
	if s.BootID == "" || boot == "" || s.BootID != boot {
		return false
	}
	return SocketFile{s.Unix, s.UnixDev, s.UnixIno}.isHere()
}

// WorkersOnThisHost is the paths of the workers' own sockets when the
// replica is on this host (OnThisHost) and every one of them is, seen from
// here, the socket the replica bound; nil otherwise (the gateway then
// reaches the workers through the replica's front).
func (s Status) WorkersOnThisHost() []string {
	return s.workersOnHost(bootID())
}

func (s Status) workersOnHost(boot string) []string {
	if len(s.WorkerSockets) == 0 || !s.onHost(boot) {
		return nil
	}
	paths := make([]string, len(s.WorkerSockets))
	for i, f := range s.WorkerSockets {
		if !f.isHere() {
			return nil
		}
		paths[i] = f.Path
	}
	return paths
}

// isHere reports whether f's path, seen from this process, is the socket
// the replica described (same device and inode).
func (f SocketFile) isHere() bool {
	if f.Path == "" || !filepath.IsAbs(f.Path) {
		return false
	}
	dev, ino, ok := socketFile(f.Path)
	return ok && dev == f.Dev && ino == f.Ino
}
