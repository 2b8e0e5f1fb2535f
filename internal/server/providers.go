package server

import (
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/provider"
	dockerprov "github.com/ferry-ml/ferry/internal/provider/docker"
	execprov "github.com/ferry-ml/ferry/internal/provider/exec"
	"github.com/ferry-ml/ferry/internal/provider/process"
	sshprov "github.com/ferry-ml/ferry/internal/provider/ssh"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// providerTypes are the node providers a compute's provider: block may name.
var providerTypes = []string{"process", "docker", "exec", "ssh"}

// providers is the registry of node providers: the server's default (the
// process provider, so Azure files work unchanged on one machine) and the
// ones computes ask for in a provider: block. Providers are made once per
// configuration and shared, since they keep track of their machines.
type providers struct {
	exe, dir string // dir: the work dir's nodes/, outside the data dir
	def      string
	runAs    string // the account jobs on process nodes run as ("" = the agent's)
	mu       sync.Mutex
	made     map[string]provider.Provider

	// For the ssh provider: the workspace key that opens the computes'
	// SSH secrets, where the server listens (reverse tunnels lead there),
	// ferry binaries for other architectures, and the tunnels kept.
	key        *secrets.Key
	serverAddr string
	// loopbackOnly: the server listens on a loopback address, which
	// containers on a Docker network cannot reach.
	loopbackOnly bool
	binaries     string
	tunnels      *sshprov.Tunnels
	log          *slog.Logger
}

func newProviders(exe, workDir, def string) *providers {
	if def == "" {
		def = "process"
	}
	return &providers{exe: exe, dir: filepath.Join(workDir, "nodes"), def: def, made: map[string]provider.Provider{},
		tunnels: sshprov.NewTunnels(), log: slog.New(slog.DiscardHandler)}
}

// factory is the workspace's ProviderFactory.
func (p *providers) factory() workspace.ProviderFactory {
	return func(c *spec.Compute) (provider.Provider, error) {
		typ := p.def
		if c.Type == "virtualmachine" {
			typ = "ssh"
		}
		if t, ok := c.Provider["type"]; ok {
			s, ok := t.(string)
			if !ok {
				return nil, fmt.Errorf("provider.type must be a name: %s", strings.Join(providerTypes, " or "))
			}
			typ = s
		}
		switch typ {
		case "process":
			return p.get("process", func() (provider.Provider, error) {
				return process.New(process.Config{Exe: p.exe, Dir: filepath.Join(p.dir, "process"), GPUs: hostGPUs(), RunAs: p.runAs})
			})
		case "docker":
			if p.loopbackOnly {
				return nil, fmt.Errorf("docker nodes reach the server through their network's gateway, but this server listens on %s, a loopback address they cannot reach; start it with --addr 0.0.0.0:PORT (or an address of this host), or use provider type process", p.serverAddr)
			}
			image, _ := c.Provider["image"].(string)
			network, _ := c.Provider["network"].(string)
			var mounts []string
			if raw, ok := c.Provider["mounts"].([]any); ok {
				for i, m := range raw {
					s, ok := m.(string)
					if !ok {
						return nil, fmt.Errorf("provider.mounts[%d] must be a string HOST:CONTAINER[:ro]", i)
					}
					mounts = append(mounts, s)
				}
			}
			key := "docker\x00" + image + "\x00" + network + "\x00" + strings.Join(mounts, "\x00")
			return p.get(key, func() (provider.Provider, error) {
				return dockerprov.New(dockerprov.Config{Image: image, Network: network, Exe: p.exe, Mounts: mounts})
			})
		case "exec":
			prog, _ := c.Provider["program"].(string)
			if prog == "" {
				return nil, fmt.Errorf("provider.program: an exec provider needs the program that launches, lists and terminates machines (see docs/providers.md)")
			}
			var args []string
			if raw, ok := c.Provider["args"].([]any); ok {
				for i, a := range raw {
					s, ok := a.(string)
					if !ok {
						return nil, fmt.Errorf("provider.args[%d] must be a string", i)
					}
					args = append(args, s)
				}
			}
			key := "exec\x00" + prog + "\x00" + strings.Join(args, "\x00")
			return p.get(key, func() (provider.Provider, error) {
				return execprov.New(execprov.Config{Program: prog, Args: args, Timeout: 2 * time.Minute})
			})
		}
		if typ == "ssh" {
			return p.ssh(c)
		}
		return nil, fmt.Errorf("provider.type: %q is not a node provider; available: %s", typ, strings.Join(providerTypes, ", "))
	}
}

func (p *providers) get(key string, mk func() (provider.Provider, error)) (provider.Provider, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if v, ok := p.made[key]; ok {
		return v, nil
	}
	v, err := mk()
	if err != nil {
		return nil, err
	}
	p.made[key] = v
	return v, nil
}

// hostGPUs are the indices of this machine's NVIDIA GPUs, which the process
// provider shares out among its nodes; none without nvidia-smi.
func hostGPUs() []int {
	out, err := exec.Command("nvidia-smi", "--query-gpu=index", "--format=csv,noheader").Output()
	if err != nil {
		return nil
	}
	var gpus []int
	for _, l := range strings.Fields(string(out)) {
		if i, err := strconv.Atoi(l); err == nil {
			gpus = append(gpus, i)
		}
	}
	return gpus
}
