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
// bound (same device and inode). A replica on another machine fails the
// first test; one in a container whose folder is not mounted at the same
// path here, or a path that here names some other file, fails the second.
// Whether the path merely exists says neither.
func (s Status) OnThisHost() bool {
	return s.onHost(bootID())
}

func (s Status) onHost(boot string) bool {
	if s.Unix == "" || !filepath.IsAbs(s.Unix) || s.BootID == "" || boot == "" || s.BootID != boot {
		return false
	}
	dev, ino, ok := socketFile(s.Unix)
	return ok && dev == s.UnixDev && ino == s.UnixIno
}
