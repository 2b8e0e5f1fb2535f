// Package docker is the `docker` node provider: each machine is a
// container on a Docker network, with an address of its own, running
// `ferry agent` from the node image (scripts/make-node-image.sh, made
// without any registry). It gives one host a cluster whose nodes are
// separate machines on a network, as multi-node jobs expect.
//
// The ferry binary is not in the image: the host's is bind-mounted
// read-only into every node, so nodes always run the server's version.
// What the provider knows lives in the engine, as container labels, so a
// provider made after a server restart lists and terminates the same
// machines.
package docker

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/ferry-ml/ferry/internal/provider"
)

// Defaults of Config.
const (
	DefaultImage   = "ferry-node:bookworm"
	DefaultNetwork = "ferry-nodes"
	defaultGrace   = 10 * time.Second
)

// Paths inside a node.
const (
	// ExePath is where the host's ferry binary is mounted in a node.
	ExePath = "/usr/local/bin/ferry"
	// NodeDir is the agent's --dir in a node. It is in the container's own
	// layer, so it goes with the container, as a cloud machine's disk does.
	NodeDir = "/var/lib/ferry-node"
)

// Labels the provider puts on its containers; the engine keeps them, and
// they are all List needs. They never hold a value of the agent's
// environment.
const (
	LabelProvider = "ferry.provider" // always "docker"
	LabelPool     = "ferry.pool"
	LabelNode     = "ferry.node"
	LabelNetwork  = "ferry.network"
	LabelSize     = "ferry.size"
	LabelGPUs     = "ferry.gpus"
)

const (
	// namePrefix starts every container name, so that the provider's
	// machines are easy to tell apart in `docker ps`.
	namePrefix = "ferry-node-"
	pollEvery  = 50 * time.Millisecond
	// startWait bounds the wait for a started container to be seen
	// running; the engine reports it running as soon as start returns.
	startWait = 30 * time.Second
	// goneWait bounds the wait for a container that another caller is
	// removing at the same time.
	goneWait = 10 * time.Second
	logTail  = 2048
)

// Config sets up a docker provider.
type Config struct {
	// Image is the node image; "" means DefaultImage. It must be on the
	// engine already: the provider never pulls.
	Image string
	// Network is the network the nodes join; "" means DefaultNetwork. It is
	// created, as a bridge network, when missing.
	Network string
	// Exe is the host's ferry binary, bind-mounted read-only into each
	// node at ExePath. Nodes are Debian bookworm: the binary must run
	// there (a static build, or one built against glibc 2.36 or older).
	Exe string
	// Mounts are extra bind mounts, "HOST:CONTAINER" or
	// "HOST:CONTAINER:ro" (or ":rw"), e.g. data folders every node
	// reads. HOST must exist.
	Mounts []string
	// Grace is how long Terminate gives a node's processes between SIGTERM
	// and SIGKILL, in whole seconds rounded up; 0 means 10s.
	Grace time.Duration
}

// Provider is the docker node provider. Its methods are safe for
// concurrent use.
type Provider struct {
	cfg    Config
	api    *client.Client
	mounts []mount.Mount
	netMu  sync.Mutex // serialises finding or creating the network
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Getter   = (*Provider)(nil)
)

// New checks cfg and connects to the Docker engine named by the usual
// DOCKER_HOST settings. The engine must share the host's file system:
// Exe and Mounts are host paths it bind-mounts.
func New(cfg Config) (*Provider, error) {
	cfg.Image = cmp.Or(cfg.Image, DefaultImage)
	cfg.Network = cmp.Or(cfg.Network, DefaultNetwork)
	if cfg.Grace <= 0 {
		cfg.Grace = defaultGrace
	}
	if cfg.Exe == "" {
		return nil, errors.New("docker provider: Exe (the ferry binary to mount into nodes) is empty")
	}
	exe, err := filepath.Abs(cfg.Exe)
	if err == nil {
		// The engine mounts the file itself, not a link to it.
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return nil, fmt.Errorf("docker provider: Exe: %w", err)
	}
	if fi, err := os.Stat(exe); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("docker provider: Exe %s is not a file", exe)
	}
	cfg.Exe = exe
	mounts := []mount.Mount{{Type: mount.TypeBind, Source: exe, Target: ExePath, ReadOnly: true}}
	for i, s := range cfg.Mounts {
		m, err := parseMount(s)
		if err != nil {
			return nil, fmt.Errorf("docker provider: Mounts[%d] %q: %w", i, s, err)
		}
		if slices.ContainsFunc(mounts, func(o mount.Mount) bool { return o.Target == m.Target }) {
			return nil, fmt.Errorf("docker provider: Mounts[%d] %q: %s is already mounted", i, s, m.Target)
		}
		mounts = append(mounts, m)
	}
	cfg.Mounts = slices.Clone(cfg.Mounts)

	api, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker provider: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := api.Ping(ctx); err != nil {
		api.Close()
		return nil, fmt.Errorf("docker provider: no Docker engine answers at %s (start dockerd, or set DOCKER_HOST): %w", api.DaemonHost(), err)
	}
	return &Provider{cfg: cfg, api: api, mounts: mounts}, nil
}

// parseMount reads "HOST:CONTAINER[:ro|:rw]" and checks that HOST exists.
func parseMount(s string) (mount.Mount, error) {
	m, err := splitMount(s)
	if err != nil {
		return mount.Mount{}, err
	}
	if _, err := os.Stat(m.Source); err != nil {
		return mount.Mount{}, fmt.Errorf("host path: %w", err)
	}
	return m, nil
}

// splitMount reads "HOST:CONTAINER[:ro|:rw]" without looking at the host.
func splitMount(s string) (mount.Mount, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return mount.Mount{}, errors.New("want HOST:CONTAINER or HOST:CONTAINER:ro")
	}
	m := mount.Mount{Type: mount.TypeBind, Source: parts[0], Target: parts[1]}
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
			m.ReadOnly = true
		case "rw":
		default:
			return mount.Mount{}, fmt.Errorf("option %q: want ro or rw", parts[2])
		}
	}
	if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target) {
		return mount.Mount{}, errors.New("both paths must be absolute")
	}
	m.Source, m.Target = filepath.Clean(m.Source), filepath.Clean(m.Target)
	if m.Target == "/" || m.Target == NodeDir {
		return mount.Mount{}, fmt.Errorf("cannot mount over %s in a node", m.Target)
	}
	return m, nil
}

// Close closes the provider's connection to the engine. Its machines keep
// running.
func (p *Provider) Close() error { return p.api.Close() }

// Type implements provider.Provider.
func (p *Provider) Type() string { return "docker" }

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// ContainerName is the name, and the machine ID, of the container of node
// name in pool: "ferry-node-POOL-NAME", with characters that Docker does
// not allow in names replaced by '-'.
func ContainerName(pool, name string) string {
	return namePrefix + unsafeName.ReplaceAllString(pool, "-") + "-" + unsafeName.ReplaceAllString(name, "-")
}

var unsafeHost = regexp.MustCompile(`[^A-Za-z0-9-]+`)

// hostname makes a node name a valid host name (RFC 1123 label).
func hostname(name string) string {
	h := strings.Trim(unsafeHost.ReplaceAllString(name, "-"), "-")
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-")
	}
	return cmp.Or(h, "ferry-node")
}

// Launch implements provider.Provider. It starts a container named
// ContainerName(r.Pool, r.Name), with host name r.Name, on the provider's
// network, running `ferry AgentArgs... --dir NodeDir` with AgentEnv in its
// environment, docker-init as PID 1 and no restart policy. A --server URL
// whose host is loopback is pointed at the network's gateway (see
// RewriteServer). GPUs are asked of the engine's nvidia driver. The
// machine's ID is the container's name and its address the container's
// IP on the network.
func (p *Provider) Launch(ctx context.Context, r provider.LaunchRequest) (provider.Machine, error) {
	m, err := p.launch(ctx, r)
	return m, redact(err, r.AgentEnv)
}

func (p *Provider) launch(ctx context.Context, r provider.LaunchRequest) (provider.Machine, error) {
	if err := ctx.Err(); err != nil {
		return provider.Machine{}, err
	}
	if r.Pool == "" || r.Name == "" {
		return provider.Machine{}, fmt.Errorf("docker provider: launch needs a pool and a node name (got %q, %q)", r.Pool, r.Name)
	}
	id := ContainerName(r.Pool, r.Name)
	if r.GPUs < 0 {
		return provider.Machine{}, fmt.Errorf("docker provider: machine %s: GPUs must not be negative (got %d)", id, r.GPUs)
	}
	for i, kv := range r.AgentEnv {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			// Not the entry itself: it may be a secret.
			return provider.Machine{}, fmt.Errorf("docker provider: machine %s: agent environment entry %d is not KEY=VALUE", id, i)
		}
	}
	netw, err := p.network(ctx)
	if err != nil {
		return provider.Machine{}, err
	}
	args, err := RewriteServer(r.AgentArgs, netw.gateway)
	if errors.Is(err, ErrNoGateway) {
		err = fmt.Errorf("%w (network %s, driver %s); give the server an address the nodes reach", err, netw.name, netw.driver)
	}
	if err != nil {
		return provider.Machine{}, fmt.Errorf("docker provider: machine %s: %w", id, err)
	}
	if _, err := p.api.ImageInspect(ctx, p.cfg.Image); err != nil {
		return provider.Machine{}, fmt.Errorf("docker provider: image %s is not on the Docker engine (make it with scripts/make-node-image.sh, or set the provider's image): %w", p.cfg.Image, err)
	}
	switch _, err := p.Get(ctx, id); {
	case err == nil:
		return provider.Machine{}, fmt.Errorf("docker provider: machine %s already exists; terminate it first or choose another name", id)
	case !errors.Is(err, provider.ErrNotFound):
		return provider.Machine{}, err
	}

	labels := map[string]string{LabelProvider: "docker", LabelPool: r.Pool, LabelNode: r.Name, LabelNetwork: netw.name}
	if r.Size != "" {
		labels[LabelSize] = r.Size
	}
	if r.GPUs > 0 {
		labels[LabelGPUs] = strconv.Itoa(r.GPUs)
	}
	grace := p.graceSeconds()
	cc := &container.Config{
		Image:       p.cfg.Image,
		Hostname:    hostname(r.Name),
		Env:         slices.Clone(r.AgentEnv),
		Entrypoint:  []string{ExePath},
		Cmd:         append(args, "--dir", NodeDir),
		WorkingDir:  NodeDir,
		Labels:      labels,
		StopTimeout: &grace, // a `docker stop` by hand gives the same grace
	}
	useInit := true // docker-init reaps the runners' orphans and forwards SIGTERM to the agent
	hc := &container.HostConfig{
		Init:          &useInit,
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Mounts:        slices.Clone(p.mounts),
	}
	if r.GPUs > 0 {
		hc.DeviceRequests = []container.DeviceRequest{{Driver: "nvidia", Count: r.GPUs, Capabilities: [][]string{{"gpu"}}}}
	}
	nc := &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{netw.name: {}}}
	created, err := p.api.ContainerCreate(ctx, cc, hc, nc, nil, id)
	if err != nil {
		return provider.Machine{}, fmt.Errorf("docker provider: machine %s: create container: %w", id, err)
	}
	m, err := p.start(ctx, id, created.ID, r.GPUs)
	if err != nil {
		// Not with ctx, which may be what ended the launch.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), goneWait)
		defer cancel()
		if rerr := p.api.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); rerr != nil {
			err = fmt.Errorf("%w (and removing the container failed: %v)", err, rerr)
		}
		return provider.Machine{}, err
	}
	return m, nil
}

// start starts a created container and waits until the engine reports it
// running with an address.
func (p *Provider) start(ctx context.Context, id, cid string, gpus int) (provider.Machine, error) {
	if err := p.api.ContainerStart(ctx, cid, container.StartOptions{}); err != nil {
		if gpus > 0 && strings.Contains(err.Error(), "nvidia") {
			return provider.Machine{}, fmt.Errorf("docker provider: machine %s: start container: %w (GPU nodes need the NVIDIA Container Toolkit on the engine's host)", id, err)
		}
		return provider.Machine{}, fmt.Errorf("docker provider: machine %s: start container: %w", id, err)
	}
	deadline := time.NewTimer(startWait)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		info, err := p.api.ContainerInspect(ctx, cid)
		if err == nil && (info.ContainerJSONBase == nil || info.State == nil || info.Config == nil) {
			err = errors.New("the engine's answer has no state")
		}
		if err != nil {
			return provider.Machine{}, fmt.Errorf("docker provider: machine %s: inspect: %w", id, err)
		}
		m := machineOf(id, info.Config.Labels, string(info.State.Status), networksOf(info.NetworkSettings), cid, info.Config.Image)
		switch {
		case m.State == provider.StateRunning && m.Address != "":
			return m, nil
		case m.State == provider.StateStopped:
			return provider.Machine{}, fmt.Errorf("docker provider: machine %s: its agent exited at once (exit code %d); its output ends:\n%s",
				id, info.State.ExitCode, p.logTail(ctx, cid))
		}
		select {
		case <-ctx.Done():
			return provider.Machine{}, ctx.Err()
		case <-deadline.C:
			return provider.Machine{}, fmt.Errorf("docker provider: machine %s: not running with an address %v after start (state %s)", id, startWait, info.State.Status)
		case <-tick.C:
		}
	}
}

// logTail is the end of a container's output, for an error message; Launch
// redacts the agent's environment from it.
func (p *Provider) logTail(ctx context.Context, cid string) string {
	rc, err := p.api.ContainerLogs(ctx, cid, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "30"})
	if err != nil {
		return "(no output: " + err.Error() + ")"
	}
	defer rc.Close()
	var b bytes.Buffer
	_, _ = stdcopy.StdCopy(&b, &b, rc)
	s := b.String()
	if len(s) > logTail {
		s = s[len(s)-logTail:]
	}
	return s
}

// redact replaces every value of env in err's message by [redacted]. An
// error holding a secret is replaced by one that does not wrap it, so
// that unwrapping cannot reveal it either.
func redact(err error, env []string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	out := msg
	for _, kv := range env {
		if _, v, ok := strings.Cut(kv, "="); ok && v != "" {
			out = strings.ReplaceAll(out, v, "[redacted]")
		}
	}
	if out == msg {
		return err
	}
	return errors.New(out)
}

func (p *Provider) graceSeconds() int {
	return int((p.cfg.Grace + time.Second - 1) / time.Second)
}

// netInfo is what Launch needs of the nodes' network.
type netInfo struct {
	name, driver string
	gateway      string // the host's address on a bridge network; "" when none
}

// network finds the nodes' network, creating a bridge network when there
// is none of that name.
func (p *Provider) network(ctx context.Context) (netInfo, error) {
	p.netMu.Lock()
	defer p.netMu.Unlock()
	n, ok, err := p.findNetwork(ctx)
	if err != nil {
		return netInfo{}, err
	}
	if !ok {
		_, cerr := p.api.NetworkCreate(ctx, p.cfg.Network, network.CreateOptions{
			Driver: "bridge", Labels: map[string]string{LabelProvider: "docker"}})
		// Another process may have made it meanwhile; look again either way.
		if n, ok, err = p.findNetwork(ctx); err != nil {
			return netInfo{}, err
		}
		if !ok {
			return netInfo{}, fmt.Errorf("docker provider: create network %s: %v", p.cfg.Network, cerr)
		}
	}
	if n.Driver == "host" || n.Driver == "null" {
		return netInfo{}, fmt.Errorf("docker provider: network %s has driver %s, where nodes get no address of their own; use a bridge network", n.Name, n.Driver)
	}
	info := netInfo{name: n.Name, driver: n.Driver}
	if n.Driver != "bridge" {
		// Elsewhere the gateway is a router, not this host.
		return info, nil
	}
	for _, c := range n.IPAM.Config {
		ip := net.ParseIP(c.Gateway)
		if ip == nil {
			continue
		}
		if info.gateway == "" || ip.To4() != nil && net.ParseIP(info.gateway).To4() == nil {
			info.gateway = ip.String() // IPv4 first: the server more often listens there
		}
	}
	return info, nil
}

// findNetwork looks the network up by its exact name.
func (p *Provider) findNetwork(ctx context.Context) (network.Summary, bool, error) {
	ns, err := p.api.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("name", p.cfg.Network))})
	if err != nil {
		return network.Summary{}, false, fmt.Errorf("docker provider: network %s: %w", p.cfg.Network, err)
	}
	for _, n := range ns {
		if n.Name == p.cfg.Network { // the filter matches parts of names too
			return n, true, nil
		}
	}
	return network.Summary{}, false, nil
}

// ErrNoGateway is wrapped by RewriteServer when --server needs a gateway
// and there is none.
var ErrNoGateway = errors.New("the nodes' network has no gateway to this host")

// RewriteServer returns a copy of the agent's args in which the URL of
// --server ("--server URL" or "--server=URL"), when its host is loopback
// (localhost, a name under .localhost, 127.0.0.0/8, ::1) or unspecified
// (0.0.0.0, ::), has that host replaced by gateway, keeping the scheme,
// port and path. Inside a container loopback is the container itself,
// while the gateway of a bridge network is the host's address on it; the
// server must listen there (on 0.0.0.0, say). Other URLs are left alone.
// Needing the rewrite with gateway "" is an error wrapping ErrNoGateway.
func RewriteServer(args []string, gateway string) ([]string, error) {
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		var at int
		var prefix, raw string
		switch {
		case out[i] == "--server" && i+1 < len(out):
			i++
			at, raw = i, out[i]
		case strings.HasPrefix(out[i], "--server="):
			at, prefix, raw = i, "--server=", strings.TrimPrefix(out[i], "--server=")
		default:
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("--server %q is not a URL", raw)
		}
		if !isLocal(u.Hostname()) {
			continue
		}
		if gateway == "" {
			return nil, fmt.Errorf("--server %s is a loopback URL, which a container cannot reach: %w", raw, ErrNoGateway)
		}
		host := gateway
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		if port := u.Port(); port != "" {
			host = net.JoinHostPort(gateway, port)
		}
		u.Host = host
		out[at] = prefix + u.String()
	}
	return out, nil
}

func isLocal(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
}

// machineOf is a container in the provider package's terms.
func machineOf(id string, labels map[string]string, state string, nets map[string]string, cid, image string) provider.Machine {
	m := provider.Machine{ID: id, Pool: labels[LabelPool], Labels: map[string]string{
		"container": cid,
		"image":     image,
		"network":   labels[LabelNetwork],
		"status":    state,
	}}
	for _, l := range []struct{ from, to string }{{LabelSize, "size"}, {LabelGPUs, "gpus"}} {
		if v := labels[l.from]; v != "" {
			m.Labels[l.to] = v
		}
	}
	switch state {
	case container.StateCreated, container.StateRestarting:
		m.State = provider.StatePending
	case container.StateRunning:
		m.State = provider.StateRunning
		m.Address = nets[labels[LabelNetwork]]
	default: // exited, dead, paused, removing
		m.State = provider.StateStopped
	}
	return m
}

// networksOf maps a container's network names to its IPv4 addresses there.
func networksOf(s *container.NetworkSettings) map[string]string {
	if s == nil {
		return nil
	}
	return addresses(s.Networks)
}

func addresses(eps map[string]*network.EndpointSettings) map[string]string {
	out := map[string]string{}
	for name, ep := range eps {
		if ep != nil {
			out[name] = cmp.Or(ep.IPAddress, ep.GlobalIPv6Address)
		}
	}
	return out
}

// containers lists the provider's containers, with more filters.
func (p *Provider) containers(ctx context.Context, more ...filters.KeyValuePair) ([]provider.Machine, error) {
	f := filters.NewArgs(append(more, filters.Arg("label", LabelProvider+"=docker"))...)
	cs, err := p.api.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("docker provider: list containers: %w", err)
	}
	out := make([]provider.Machine, 0, len(cs))
	for _, c := range cs {
		if len(c.Names) == 0 {
			continue
		}
		var nets map[string]string
		if c.NetworkSettings != nil {
			nets = addresses(c.NetworkSettings.Networks)
		}
		out = append(out, machineOf(strings.TrimPrefix(c.Names[0], "/"), c.Labels, string(c.State), nets, c.ID, c.Image))
	}
	slices.SortFunc(out, func(a, b provider.Machine) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// List implements provider.Provider, sorted by ID. It asks the engine for
// the containers labelled as this provider's, on any network and from any
// image.
func (p *Provider) List(ctx context.Context, pool string) ([]provider.Machine, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if pool == "" {
		return p.containers(ctx)
	}
	return p.containers(ctx, filters.Arg("label", LabelPool+"="+pool))
}

// Get implements provider.Getter. A container of that name that the
// provider did not make is not found.
func (p *Provider) Get(ctx context.Context, id string) (provider.Machine, error) {
	if !strings.HasPrefix(id, namePrefix) || unsafeName.MatchString(id) {
		return provider.Machine{}, fmt.Errorf("docker provider: %q is not a machine ID of this provider (%sPOOL-NAME)", id, namePrefix)
	}
	ms, err := p.containers(ctx, filters.Arg("name", "^/?"+regexp.QuoteMeta(id)+"$"))
	if err != nil {
		return provider.Machine{}, err
	}
	for _, m := range ms {
		if m.ID == id {
			return m, nil
		}
	}
	return provider.Machine{}, fmt.Errorf("docker provider: machine %s: %w", id, provider.ErrNotFound)
}

// Terminate implements provider.Provider. It stops the container (SIGTERM
// to the agent through docker-init, SIGKILL to everything after the grace)
// and removes it with its file system, node directory included.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	m, err := p.Get(ctx, id)
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	cid := m.Labels["container"]
	grace := p.graceSeconds()
	// A failed stop is not final: the forced removal below kills what runs.
	if err := p.api.ContainerStop(ctx, cid, container.StopOptions{Timeout: &grace}); err != nil && ctx.Err() != nil {
		return fmt.Errorf("docker provider: terminate %s: %w", id, ctx.Err())
	}
	rerr := p.api.ContainerRemove(ctx, cid, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if rerr == nil {
		return nil
	}
	// Gone already, or being removed by another caller: wait for that.
	deadline := time.NewTimer(goneWait)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		if _, err := p.Get(ctx, id); errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("docker provider: terminate %s: %w", id, ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("docker provider: terminate %s: %w", id, rerr)
		case <-tick.C:
		}
	}
}
