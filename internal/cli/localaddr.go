package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/ferry-ml/ferry/internal/server"
)

// localAddrFile, in FERRY_HOME, is the address the local workspace's
// server listens on: chosen when the CLI first starts it, and the same on
// every start after. Endpoints' scoring URIs hold it, and what runs off
// this machine keeps calling the URL it was given; what the server
// started on this machine (runners and the local executor, the agents of
// instances and cluster nodes, endpoints' replicas) would find it
// elsewhere too, through the work dir's server.url (internal/serverurl).
const localAddrFile = "server.addr"

// localAddr returns the address recorded in home, choosing and recording
// one if there is none.
func localAddr(home string) (string, error) {
	path := filepath.Join(home, localAddrFile)
	data, err := os.ReadFile(path)
	if err == nil {
		addr := strings.TrimSpace(string(data))
		if _, _, err := splitLoopbackAddr(addr); err != nil {
			return "", fmt.Errorf("%s: %w; write an address such as 127.0.0.1:8581 there, or remove the file to have a free port chosen", path, err)
		}
		return addr, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	addr, err := chooseLocalAddr()
	if err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(addr+"\n"), 0o600); err != nil {
		return "", err
	}
	return addr, os.Rename(tmp, path)
}

// splitLoopbackAddr checks that addr is HOST:PORT with a port.
func splitLoopbackAddr(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not an address HOST:PORT", addr)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q has no port from 1 to 65535", addr)
	}
	return host, port, nil
}

// chooseLocalAddr picks a free loopback port below the kernel's range of
// ephemeral ports, which it hands out to outgoing connections: a port in
// that range may be one's for a moment while the workspace's server is
// down, and the server could not listen there when it starts again.
func chooseLocalAddr() (string, error) {
	lo, hi := 20000, ephemeralLow()-1
	if hi <= lo {
		lo, hi = 10000, 19999
	}
	for range 50 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(lo+rand.IntN(hi-lo+1)))
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			return addr, nil
		}
	}
	// Every try was taken: whatever port the kernel gives.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port for the local workspace: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// where it cannot be read: Linux's default).
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

// addrTaken says whether something listens on addr already, so that the
// server would not start there.
func addrTaken(addr string) bool {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return errors.Is(err, syscall.EADDRINUSE)
	}
	ln.Close()
	return false
}

// addrTakenError is the error of a local workspace whose address another
// program holds.
func (a *app) addrTakenError(home, addr string) error {
	_, port, _ := splitLoopbackAddr(addr)
	if data, err := os.ReadFile(filepath.Join(home, server.InfoFile)); err == nil {
		var info server.Info
		if json.Unmarshal(data, &info) == nil && info.PID > 0 && processAlive(info.PID) {
			if ok, _ := isServerOf(info.PID, home); ok {
				return fmt.Errorf("the local workspace's server (pid %d) holds its address %s but does not answer; see %s, or end it with `%s server stop`",
					info.PID, addr, filepath.Join(home, "server.log"), a.self)
			}
		}
	}
	return fmt.Errorf("the local workspace's address %s is taken: another program listens on port %d, so its server cannot start there. "+
		"End that program (`ss -ltnp 'sport = :%d'` names it), or move the workspace to another address by writing one such as 127.0.0.1:%d into %s: "+
		"the jobs, instances, cluster nodes and replicas it runs on this machine find it there, but endpoints' scoring URIs change with the address, "+
		"and what runs elsewhere (nodes of the ssh and exec providers, Slurm jobs) keeps calling the old one",
		addr, port, port, port+1, filepath.Join(home, localAddrFile))
}
