package testutil

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Proc is a live process of this machine, as /proc shows it: the tests
// that prove nothing outlives a job, a runner or a test look for them.
type Proc struct {
	PID  int
	Exe  string   // its binary ("" when unreadable), without " (deleted)"
	Args []string // its command line
}

// CmdLine is the command line, its arguments joined by spaces.
func (p Proc) CmdLine() string { return strings.Join(p.Args, " ") }

// Env is the process's environment as the kernel keeps it, NUL after each
// NAME=value ("" when unreadable).
func (p Proc) Env() string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.PID), "environ"))
	return string(b)
}

// HasEnv reports whether the process's environment holds exactly kv
// ("NAME=value").
func (p Proc) HasEnv(kv string) bool {
	env := p.Env()
	return strings.HasPrefix(env, kv+"\x00") || strings.Contains(env, "\x00"+kv+"\x00")
}

// Procs lists the live processes other than this one; zombies, which have
// ended and wait to be reaped, are left out.
func Procs() []Proc {
	var out []Proc
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		if st, err := os.ReadFile(filepath.Join(dir, "stat")); err != nil || zombie(st) {
			continue
		}
		exe, _ := os.Readlink(filepath.Join(dir, "exe"))
		cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		out = append(out, Proc{PID: pid, Exe: strings.TrimSuffix(exe, " (deleted)"),
			Args: strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")})
	}
	return out
}

// zombie reports whether a /proc/PID/stat line is of an ended process.
func zombie(stat []byte) bool {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && (s[i+2] == 'Z' || s[i+2] == 'X')
}

// JobProcs lists the live processes of a Ferry job on this machine: those
// whose environment holds FERRY_JOB_ID=job. Every process of a job's
// command inherits it, whatever it did to leave the job's process group
// or session, so it is the job's own record of which processes are its.
func JobProcs(job string) []Proc {
	var out []Proc
	for _, p := range Procs() {
		if p.HasEnv("FERRY_JOB_ID=" + job) {
			out = append(out, p)
		}
	}
	return out
}
