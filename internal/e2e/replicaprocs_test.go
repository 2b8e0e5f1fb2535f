package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// What a test that kills a replica needs: its processes and its sockets,
// read from /proc.

// replicaFront is the process of the inference server's front of the
// replica whose worker workerPID answered a request. A replica is the
// front and its WORKER_COUNT workers, in the process group the runner
// started the job in (the job's shell execs into the front, which leads
// the group).
func replicaFront(t *testing.T, workerPID int) int {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", workerPID))
	if err != nil {
		t.Fatalf("the worker that answered: %v", err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	ppid, _ := strconv.Atoi(fields[1])
	pgid, _ := strconv.Atoi(fields[2])
	if pgid != ppid || pgid <= 1 || pgid == syscall.Getpgrp() {
		t.Fatalf("worker %d: process group %d, parent %d; want the group its front (the parent) leads", workerPID, pgid, ppid)
	}
	return ppid
}

// killReplica kills with SIGKILL the whole replica whose front is front:
// its process group, at once. Killed one by one, front first, a worker
// ends by itself when its socket to the front does, and the kill after
// finds no process.
func killReplica(t *testing.T, front int) {
	t.Helper()
	if err := syscall.Kill(-front, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the replica's process group %d: %v", front, err)
	}
}

// tcpSocket is a line of /proc/net/tcp, addresses as the kernel writes
// them (hex).
type tcpSocket struct{ local, remote, state, inode string }

// tcpSockets is the IPv4 TCP sockets of this network namespace, which
// the replicas of the process provider's nodes share.
func tcpSockets(t *testing.T) []tcpSocket {
	t.Helper()
	raw, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	var socks []tcpSocket
	for i, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if f := strings.Fields(line); i > 0 && len(f) >= 10 {
			socks = append(socks, tcpSocket{local: f[1], remote: f[2], state: f[3], inode: f[9]})
		}
	}
	return socks
}

// listenAddress is the address that process pid listens on, as
// /proc/net/tcp writes it.
func listenAddress(t *testing.T, pid int) string {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		if to, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil {
			if inode, ok := strings.CutPrefix(to, "socket:["); ok {
				inodes[strings.TrimSuffix(inode, "]")] = true
			}
		}
	}
	for _, s := range tcpSockets(t) {
		if s.state == "0A" && inodes[s.inode] {
			return s.local
		}
	}
	t.Fatalf("process %d listens on no TCP address", pid)
	return ""
}

// connsTo is the connections open to addr (a listenAddress), by inode.
func connsTo(t *testing.T, addr string) []string {
	t.Helper()
	var conns []string
	for _, s := range tcpSockets(t) {
		if s.remote == addr && s.state != "0A" && s.inode != "0" {
			conns = append(conns, s.inode)
		}
	}
	return conns
}

// hostPort is a /proc/net/tcp IPv4 address as host:port.
func hostPort(t *testing.T, addr string) string {
	t.Helper()
	ip, port, _ := strings.Cut(addr, ":")
	a, err1 := strconv.ParseUint(ip, 16, 32)
	p, err2 := strconv.ParseUint(port, 16, 16)
	if err1 != nil || err2 != nil {
		t.Fatalf("address %q from /proc/net/tcp", addr)
	}
	return fmt.Sprintf("%d.%d.%d.%d:%d", byte(a), byte(a>>8), byte(a>>16), byte(a>>24), p)
}
