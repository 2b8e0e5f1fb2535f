package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"github.com/ferry-ml/ferry/internal/provider"
	sshprov "github.com/ferry-ml/ferry/internal/provider/ssh"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// ssh makes the ssh provider of an attached machine (type virtualmachine),
// whose settings are the compute's own fields. c carries sealed secrets;
// they are opened here, into the provider's memory only.
func (p *providers) ssh(c *spec.Compute) (provider.Provider, error) {
	return p.get(sshKey(c), func() (provider.Provider, error) {
		open, err := workspace.OpenCompute(p.key, c)
		if err != nil {
			return nil, err
		}
		s := open.SSHSettings
		if s == nil {
			return nil, fmt.Errorf("ssh_settings: is required")
		}
		cfg := p.sshConfig(c)
		h := sshprov.Host{Address: open.Address, Port: s.SSHPort, HostKey: open.HostKey}
		if host, port, err := net.SplitHostPort(open.Address); err == nil {
			if n, err := strconv.Atoi(port); err == nil {
				h.Address, h.Port = host, n
			}
		}
		cfg.Hosts = []sshprov.Host{h}
		cfg.Login = sshprov.Login{User: s.AdminUsername, Password: secrets.Secret(s.AdminPassword),
			PrivateKey: secrets.Secret(s.SSHPrivateKey), Passphrase: secrets.Secret(s.SSHPrivateKeyPassphrase), Field: "ssh_settings"}
		return sshprov.New(cfg)
	})
}

// sshFleet makes the ssh provider of a fleet (provider: {type: ssh, hosts:
// [...], ssh_settings: {...}, power_off_command}). The settings it is given
// were read from the sealed block, which is enough to check them; the
// block is read again once its secrets are opened.
func (p *providers) sshFleet(c *spec.Compute, sealed sshprov.Settings) (provider.Provider, error) {
	if c.MaxInstances != nil && *c.MaxInstances > len(sealed.Hosts) {
		return nil, fmt.Errorf("max_instances: %d is more than the %d machines in provider.hosts", *c.MaxInstances, len(sealed.Hosts))
	}
	return p.get(sshKey(c), func() (provider.Provider, error) {
		open, err := workspace.OpenCompute(p.key, c)
		if err != nil {
			return nil, err
		}
		s, err := sshprov.ParseSettings(open.Provider)
		if err != nil {
			return nil, err
		}
		cfg := p.sshConfig(c)
		cfg.Hosts, cfg.Login, cfg.PowerOff = s.Hosts, s.Login, s.PowerOff
		return sshprov.New(cfg)
	})
}

// sshKey is the registry key of a compute's ssh provider: one per compute
// and configuration, so a changed compute gets a new provider.
func sshKey(c *spec.Compute) string {
	raw, _ := json.Marshal(c)
	sum := sha256.Sum256(raw)
	return "ssh\x00" + c.Name + "\x00" + hex.EncodeToString(sum[:])
}

// sshConfig is what every ssh provider of this server shares.
func (p *providers) sshConfig(c *spec.Compute) sshprov.Config {
	return sshprov.Config{
		Pool: c.Name, Exe: p.exe, Binaries: p.binaries,
		StateDir:   filepath.Join(p.dir, "ssh"),
		ServerAddr: p.serverAddr, Tunnels: p.tunnels, Log: p.log,
	}
}
