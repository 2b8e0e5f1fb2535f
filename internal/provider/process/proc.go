package process

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procInfo is what /proc/<pid>/stat tells about a process.
type procInfo struct {
	State byte   // R, S, D, Z, ...
	PGID  int    // process group
	Start uint64 // start time in clock ticks after boot: with the pid, it names one process
}

// dead says whether the process has ended (a zombie has: it only waits to
// be reaped, and its parent may never do it).
func (i procInfo) dead() bool { return i.State == 'Z' || i.State == 'X' }

// readProc reads /proc/<pid>/stat. The command name (field 2) may hold
// spaces and parentheses, so fields are counted from its last ')'.
func readProc(pid int) (procInfo, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), f[2] field 5 (pgrp), f[19] field 22 (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return procInfo{}, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	pgid, err := strconv.Atoi(f[2])
	if err != nil {
		return procInfo{}, fmt.Errorf("/proc/%d/stat: pgrp: %w", pid, err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procInfo{}, fmt.Errorf("/proc/%d/stat: starttime: %w", pid, err)
	}
	return procInfo{State: f[0][0], PGID: pgid, Start: start}, nil
}

// bootID names this boot of the kernel. Start times count from boot, so a
// record from an earlier boot names no live process, whatever its numbers.
func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", errors.New("/proc/sys/kernel/random/boot_id is empty")
	}
	return id, nil
}

// pids lists the processes of this pid namespace.
func pids() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out, nil
}
