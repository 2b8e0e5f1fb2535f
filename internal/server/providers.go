package server

import (
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"sort"
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

// providerType is one kind of node provider, as a compute's provider:
// block names it in type: how the block is checked and how a provider is
// made from it.
type providerType struct {
	check func(block map[string]any) error
	make  func(p *providers, c *spec.Compute, block map[string]any) (provider.Provider, error)
}

// providerTypes is the registry of node providers. Adding one is a package
// with a ParseSettings and a line here.
var providerTypes = map[string]providerType{
	"process": register(process.ParseSettings, (*providers).process),
	"docker":  register(dockerprov.ParseSettings, (*providers).docker),
	"exec":    register(execprov.ParseSettings, (*providers).exec),
	"ssh":     register(sshprov.ParseSettings, (*providers).sshFleet),
}

// register makes a providerType of a provider package's parse function and
// the server's way of making that provider from its settings.
func register[S any](parse func(map[string]any) (S, error), mk func(*providers, *spec.Compute, S) (provider.Provider, error)) providerType {
	return providerType{
		check: func(block map[string]any) error { _, err := parse(block); return err },
		make: func(p *providers, c *spec.Compute, block map[string]any) (provider.Provider, error) {
			s, err := parse(block)
			if err != nil {
				return nil, err
			}
			return mk(p, c, s)
		},
	}
}

// providerTypeNames are the registry's names, sorted, for messages.
func providerTypeNames() []string {
	names := make([]string, 0, len(providerTypes))
	for n := range providerTypes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// providers is the registry of node providers: the server's default (the
// process provider, so Azure files work unchanged on one machine) and the
// ones computes ask for in a provider: block. Providers are made once per
// configuration and shared, since they keep track of their machines.
type providers struct {
	exe, dir string // dir: the work dir's nodes/, outside the data dir
	def      string
	runAs    string // the account jobs on process nodes run as ("" = the agent's)
	jobUIDs  string // the range of uids their attempts each run as one of ("" = none)
	urlFile  string // the file this server records its URL in, for process agents
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

// providerOf finds the registered type of a pool compute's provider: the
// one its provider block names, else the server's default.
func (p *providers) providerOf(c *spec.Compute) (providerType, error) {
	typ := p.def
	if t, ok := c.Provider["type"]; ok {
		s, ok := t.(string)
		if !ok {
			return providerType{}, fmt.Errorf("provider.type: must be the name of a node provider; known: %s", strings.Join(providerTypeNames(), ", "))
		}
		typ = s
	}
	pt, ok := providerTypes[typ]
	if !ok {
		return providerType{}, fmt.Errorf("provider.type: unknown provider %q; known: %s", typ, strings.Join(providerTypeNames(), ", "))
	}
	return pt, nil
}

// check is the workspace's ProviderCheck: it reads a compute's provider
// block as its provider would, without making anything.
func (p *providers) check(c *spec.Compute) error {
	if pt := poolTypes[c.Type]; pt != nil && pt.Attached {
		return nil // an attached machine's settings are the compute's own fields
	}
	pt, err := p.providerOf(c)
	if err != nil {
		return err
	}
	return pt.check(c.Provider)
}

// factory is the workspace's ProviderFactory.
func (p *providers) factory() workspace.ProviderFactory {
	return func(c *spec.Compute) (provider.Provider, error) {
		if pt := poolTypes[c.Type]; pt != nil && pt.Attached {
			return p.ssh(c)
		}
		pt, err := p.providerOf(c)
		if err != nil {
			return nil, err
		}
		return pt.make(p, c, c.Provider)
	}
}

func (p *providers) process(*spec.Compute, process.Settings) (provider.Provider, error) {
	return p.get("process", func() (provider.Provider, error) {
		return process.New(process.Config{Exe: p.exe, Dir: filepath.Join(p.dir, "process"), GPUs: hostGPUs(), RunAs: p.runAs, JobUIDs: p.jobUIDs, ServerFile: p.urlFile})
	})
}

func (p *providers) docker(_ *spec.Compute, s dockerprov.Settings) (provider.Provider, error) {
	if p.loopbackOnly {
		return nil, fmt.Errorf("docker nodes reach the server through their network's gateway, but this server listens on %s, a loopback address they cannot reach; start it with --addr 0.0.0.0:PORT (or an address of this host), or use provider type process", p.serverAddr)
	}
	return p.get(s.String(), func() (provider.Provider, error) {
		return dockerprov.New(dockerprov.Config{Image: s.Image, Network: s.Network, Exe: p.exe, Mounts: s.Mounts})
	})
}

func (p *providers) exec(_ *spec.Compute, s execprov.Settings) (provider.Provider, error) {
	return p.get(s.String(), func() (provider.Provider, error) {
		return execprov.New(execprov.Config{Program: s.Program, Args: s.Args, Timeout: 2 * time.Minute})
	})
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
