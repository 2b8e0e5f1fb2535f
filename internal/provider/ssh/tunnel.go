package ssh

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/sshx"
)

// Tunnels keeps the reverse tunnels of nodes whose machine cannot reach
// the server: a listener on 127.0.0.1:PORT on the machine whose
// connections come out at the server's address here. When the SSH
// connection drops, the tunnel is re-dialled (with backoff) and re-opened
// on the same port, so the agent, which keeps retrying its server URL,
// finds the server again. Safe for concurrent use.
type Tunnels struct {
	mu sync.Mutex
	m  map[string]*tunnel // by node (machine ID)
}

type tunnel struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// NewTunnels makes an empty registry.
func NewTunnels() *Tunnels { return &Tunnels{m: map[string]*tunnel{}} }

// open starts a tunnel for node over c, on a port the machine picks, and
// keeps it (re-dialling with cfg) until close. It returns the port.
func (t *Tunnels) open(ctx context.Context, node string, c *sshx.Conn, cfg sshx.Config, serverAddr string, log *slog.Logger) (int, error) {
	tctx, cancel := context.WithCancel(context.Background())
	bound, err := c.ReverseForward(tctx, "127.0.0.1:0", serverAddr)
	if err != nil {
		cancel()
		return 0, err
	}
	_, ps, _ := net.SplitHostPort(bound)
	port, err := strconv.Atoi(ps)
	if err != nil {
		cancel()
		return 0, fmt.Errorf("reverse tunnel bound to %q: %w", bound, err)
	}
	t.start(node, tctx, cancel, c, cfg, port, serverAddr, log)
	return port, nil
}

// keep re-opens the tunnel of node on port, if it is not kept already
// (after a server restart).
func (t *Tunnels) keep(node string, cfg sshx.Config, port int, serverAddr string, log *slog.Logger) {
	t.mu.Lock()
	_, ok := t.m[node]
	t.mu.Unlock()
	if ok {
		return
	}
	tctx, cancel := context.WithCancel(context.Background())
	t.start(node, tctx, cancel, nil, cfg, port, serverAddr, log)
}

func (t *Tunnels) start(node string, ctx context.Context, cancel context.CancelFunc, c *sshx.Conn, cfg sshx.Config, port int, serverAddr string, log *slog.Logger) {
	tn := &tunnel{cancel: cancel, done: make(chan struct{})}
	t.mu.Lock()
	if old, ok := t.m[node]; ok {
		old.cancel()
	}
	t.m[node] = tn
	t.mu.Unlock()
	go func() {
		defer close(tn.done)
		backoff := time.Second
		for {
			if c != nil {
				stop := context.AfterFunc(ctx, func() { c.Close() })
				_ = c.Wait()
				stop()
				c.Close()
				if ctx.Err() != nil {
					return
				}
				log.Warn("reverse tunnel dropped; re-dialling", "node", node, "machine", cfg.Address)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			nc, err := sshx.Dial(ctx, cfg)
			if err == nil {
				_, err = nc.ReverseForward(ctx, "127.0.0.1:"+strconv.Itoa(port), serverAddr)
				if err != nil {
					nc.Close()
				}
			}
			if err != nil {
				c = nil
				backoff = min(backoff*2, 30*time.Second)
				log.Warn("reverse tunnel: cannot re-open yet", "node", node, "machine", cfg.Address, "err", err)
				continue
			}
			log.Info("reverse tunnel re-opened", "node", node, "machine", cfg.Address, "port", port)
			c, backoff = nc, time.Second
		}
	}()
}

// close stops node's tunnel, if it has one, and waits for it to end.
func (t *Tunnels) close(node string) {
	t.mu.Lock()
	tn, ok := t.m[node]
	delete(t.m, node)
	t.mu.Unlock()
	if ok {
		tn.cancel()
		<-tn.done
	}
}

// Close stops every tunnel.
func (t *Tunnels) Close() {
	t.mu.Lock()
	nodes := make([]string, 0, len(t.m))
	for n := range t.m {
		nodes = append(nodes, n)
	}
	t.mu.Unlock()
	for _, n := range nodes {
		t.close(n)
	}
}
