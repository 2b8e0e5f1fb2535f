// Package unixsock dials Unix sockets whose path may be longer than a
// socket address holds.
package unixsock

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// Dial connects to the Unix socket at path with d. A socket's path is at
// most 107 bytes; a longer one (a socket deep in a job's or a runs
// folder) is reached through a descriptor of its folder, as
// /proc/self/fd/N/NAME, the way such sockets are bound.
func Dial(ctx context.Context, d *net.Dialer, path string) (net.Conn, error) {
	if len(path) < 100 {
		return d.DialContext(ctx, "unix", path)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	c, err := d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(int(dir.Fd()))+"/"+filepath.Base(path))
	if err != nil {
		return nil, fmt.Errorf("dial unix %s: %w", path, err)
	}
	return c, nil
}
