package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/buildinfo"
	"github.com/ferry-ml/ferry/internal/nodeproto"
)

// gatherFacts says what this node is. Nothing in it is fatal: a fact that
// cannot be read is reported as zero (and logged), and the server decides
// whether such a node is of any use.
func gatherFacts(ctx context.Context, cfg Config, log *slog.Logger) nodeproto.Facts {
	f := nodeproto.Facts{OS: runtime.GOOS, Arch: runtime.GOARCH, Version: cfg.Version}
	var err error
	if f.Hostname, err = os.Hostname(); err != nil {
		log.Warn("hostname unknown", "err", err)
	}
	cgCPUs, cgMem := cgroupLimits("/sys/fs/cgroup", readFile("/proc/self/cgroup"))
	f.CPUs = cpuCount(runtime.NumCPU(), cgCPUs)
	total, err := memTotal(readFile("/proc/meminfo"))
	if err != nil {
		log.Warn("memory size unknown", "err", err)
	}
	if cgMem > 0 && (total == 0 || cgMem < total) {
		total = cgMem
	}
	f.MemoryBytes = total
	visible, limited := lookupEnv(cfg.Env, "CUDA_VISIBLE_DEVICES")
	f.GPUs = probeGPUs(ctx, visible, limited, log)
	f.Address = cfg.Address
	if f.Address == "" {
		if f.Address, err = addressToward(cfg.Server); err != nil {
			// The hostname is a better guess than nothing: on a network
			// with DNS, other nodes can still reach us by it.
			log.Warn("cannot tell this node's address toward the server; using the hostname (set --address)", "err", err)
			f.Address = f.Hostname
		}
	}
	return f
}

func readFile(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

// cpuCount is the CPUs this node may use: runtime.NumCPU already honours
// the CPU affinity mask; a cgroup CPU quota (a container's --cpus) can
// lower it further.
func cpuCount(affinity int, cgroupCPUs float64) int {
	n := affinity
	if cgroupCPUs > 0 {
		n = min(n, max(1, int(math.Ceil(cgroupCPUs))))
	}
	return n
}

// memTotal reads MemTotal from the text of /proc/meminfo.
func memTotal(meminfo string) (int64, error) {
	sc := bufio.NewScanner(strings.NewReader(meminfo))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: MemTotal %q: %w", fields[1], err)
			}
			return kb * 1024, nil
		}
	}
	return 0, errors.New("/proc/meminfo has no MemTotal")
}

// cgroupLimits returns the tightest CPU quota (in CPUs) and memory limit
// (in bytes) among the cgroups of this process and their ancestors, 0 where
// there is none. root is where cgroupfs is mounted and self the text of
// /proc/self/cgroup. Both cgroup v2 (cpu.max, memory.max) and the v1
// controllers (cpu.cfs_quota_us, memory.limit_in_bytes) are read, so it
// works on hybrid hosts too; files that are missing are skipped.
func cgroupLimits(root, self string) (cpus float64, mem int64) {
	lowerCPU := func(c float64) {
		if c > 0 && (cpus == 0 || c < cpus) {
			cpus = c
		}
	}
	lowerMem := func(m int64) {
		if m > 0 && (mem == 0 || m < mem) {
			mem = m
		}
	}
	for line := range strings.Lines(self) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		controllers, path := strings.Split(parts[1], ","), parts[2]
		switch {
		case parts[0] == "0" && parts[1] == "": // v2
			for _, dir := range ancestors(root, path) {
				lowerCPU(cpuMax(readFile(filepath.Join(dir, "cpu.max"))))
				lowerMem(parseLimit(readFile(filepath.Join(dir, "memory.max"))))
			}
		case slices.Contains(controllers, "cpu"):
			for _, dir := range ancestors(filepath.Join(root, "cpu"), path) {
				quota := parseLimit(readFile(filepath.Join(dir, "cpu.cfs_quota_us")))
				period := parseLimit(readFile(filepath.Join(dir, "cpu.cfs_period_us")))
				if quota > 0 && period > 0 {
					lowerCPU(float64(quota) / float64(period))
				}
			}
		case slices.Contains(controllers, "memory"):
			for _, dir := range ancestors(filepath.Join(root, "memory"), path) {
				// v1 says "no limit" with a huge number; the MemTotal
				// comparison makes that harmless.
				lowerMem(parseLimit(readFile(filepath.Join(dir, "memory.limit_in_bytes"))))
			}
		}
	}
	return cpus, mem
}

// ancestors lists mount/path and each of its parents up to mount. Inside
// a container the path is often the host's and does not exist under the
// container's mount; the mount itself then still holds the limits.
func ancestors(mount, path string) []string {
	var dirs []string
	for p := filepath.Clean("/" + path); ; p = filepath.Dir(p) {
		dirs = append(dirs, filepath.Join(mount, p))
		if p == "/" {
			return dirs
		}
	}
}

// cpuMax reads a v2 cpu.max ("max 100000" or "150000 100000").
func cpuMax(s string) float64 {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0
	}
	quota, err1 := strconv.ParseFloat(f[0], 64)
	period, err2 := strconv.ParseFloat(f[1], 64)
	if err1 != nil || err2 != nil || period <= 0 {
		return 0 // "max" or garbage: no limit
	}
	return quota / period
}

// parseLimit reads one integer; "max", -1 and garbage mean no limit (0).
func parseLimit(s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// gpuQuery is the nvidia-smi query. The uuid column lets a
// CUDA_VISIBLE_DEVICES that names GPUs by UUID be honoured too.
var gpuQuery = []string{"--query-gpu=index,name,memory.total,uuid", "--format=csv,noheader,nounits"}

// gpu is one line of nvidia-smi.
type gpu struct {
	nodeproto.GPU
	uuid string
}

// probeGPUs asks nvidia-smi for the node's GPUs. No nvidia-smi means no
// GPUs; one that fails means no GPUs too, with a log line, since a node
// whose driver is broken cannot run GPU jobs. When the agent's own
// environment sets CUDA_VISIBLE_DEVICES (the process provider splits one
// host's GPUs among several agents that way), only those GPUs are this
// node's.
func probeGPUs(ctx context.Context, visible string, limited bool, log *slog.Logger) []nodeproto.GPU {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, gpuQuery...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		log.Warn("nvidia-smi failed; reporting no GPUs", "err", err, "stderr", strings.TrimSpace(stderr.String()))
		return nil
	}
	gpus, err := parseNvidiaSMI(string(out))
	if err != nil {
		log.Warn("nvidia-smi output not understood; reporting no GPUs", "err", err)
		return nil
	}
	if limited {
		gpus = visibleGPUs(gpus, visible)
	}
	list := make([]nodeproto.GPU, len(gpus))
	for i, g := range gpus {
		list[i] = g.GPU
	}
	return list
}

// parseNvidiaSMI reads the lines of the gpuQuery: "index, name, memory
// MiB, uuid". The name is everything between the index and the last two
// fields, in case a name has a comma; a memory nvidia-smi cannot tell
// ("[N/A]") is 0.
func parseNvidiaSMI(out string) ([]gpu, error) {
	var gpus []gpu
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		raw := strings.Split(line, ",")
		if len(raw) < 4 {
			return nil, fmt.Errorf("line %q: want index, name, memory.total, uuid", line)
		}
		f := make([]string, len(raw))
		for i := range raw {
			f[i] = strings.TrimSpace(raw[i])
		}
		idx, err := strconv.Atoi(f[0])
		if err != nil || idx < 0 {
			return nil, fmt.Errorf("line %q: index %q is not a number", line, f[0])
		}
		memMB, err := strconv.ParseInt(f[len(f)-2], 10, 64)
		if err != nil {
			memMB = 0
		}
		gpus = append(gpus, gpu{
			GPU:  nodeproto.GPU{Index: idx, Name: strings.TrimSpace(strings.Join(raw[1:len(raw)-2], ",")), MemoryMB: memMB},
			uuid: f[len(f)-1],
		})
	}
	return gpus, nil
}

// visibleGPUs keeps the GPUs that CUDA_VISIBLE_DEVICES lets CUDA see, read
// as CUDA reads it: a comma-separated list of indices or (prefixes of)
// UUIDs, where the first entry that names no GPU ends the list, and an
// empty value hides every GPU. The GPUs keep nvidia-smi's host indices:
// the agent gives each runner its own CUDA_VISIBLE_DEVICES, which replaces
// the agent's, so assignments name host indices too.
func visibleGPUs(gpus []gpu, visible string) []gpu {
	seen := map[int]bool{}
	for entry := range strings.SplitSeq(visible, ",") {
		entry = strings.TrimSpace(entry)
		i := slices.IndexFunc(gpus, func(g gpu) bool {
			if n, err := strconv.Atoi(entry); err == nil {
				return g.Index == n
			}
			return strings.HasPrefix(entry, "GPU-") && strings.HasPrefix(g.uuid, entry)
		})
		if i < 0 {
			break
		}
		seen[gpus[i].Index] = true
	}
	return slices.DeleteFunc(slices.Clone(gpus), func(g gpu) bool { return !seen[g.Index] })
}

// lookupEnv finds key in an environment list; the last one wins, as in
// exec.Cmd.
func lookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v, true
		}
	}
	return "", false
}

// addressToward is the IP of the interface this machine uses to reach
// server: "connecting" a UDP socket picks the route and sends nothing.
func addressToward(server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", err
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	c, err := net.Dial("udp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return "", err
	}
	defer c.Close()
	addr, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok {
		return "", fmt.Errorf("local address %v is not an IP address", c.LocalAddr())
	}
	return addr.IP.String(), nil
}

// buildVersion is this binary's version: the module version when it was
// built from a tagged module, else the VCS revision.
func buildVersion() string {
	info := buildinfo.Read()
	if !info.Known {
		return ""
	}
	if v := info.Module; v != "(devel)" {
		return v
	}
	if info.Revision == "" {
		return "devel"
	}
	if info.Modified {
		return info.ShortRevision() + "-dirty"
	}
	return info.ShortRevision()
}
