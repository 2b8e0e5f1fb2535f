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

// ssh makes the ssh provider of an attached machine (type virtualmachine)
// or an ssh fleet (provider: {type: ssh, hosts: [...], ssh_settings: {...},
// power_off_command}). c carries sealed secrets; they are opened here, into
// the provider's memory only.
func (p *providers) ssh(c *spec.Compute) (provider.Provider, error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(raw)
	key := "ssh\x00" + c.Name + "\x00" + hex.EncodeToString(sum[:])
	return p.get(key, func() (provider.Provider, error) {
		open, err := workspace.OpenCompute(p.key, c)
		if err != nil {
			return nil, err
		}
		cfg := sshprov.Config{
			Pool: c.Name, Exe: p.exe, Binaries: p.binaries,
			StateDir:   filepath.Join(p.dir, "ssh"),
			ServerAddr: p.serverAddr, Tunnels: p.tunnels, Log: p.log,
		}
		if c.Type == "virtualmachine" {
			s := open.SSHSettings
			if s == nil {
				return nil, fmt.Errorf("ssh_settings: is required")
			}
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
		}
		return p.sshFleet(open, cfg)
	})
}

// sshFleet reads a fleet's provider block.
func (p *providers) sshFleet(c *spec.Compute, cfg sshprov.Config) (provider.Provider, error) {
	for k := range c.Provider {
		switch k {
		case "type", "hosts", "ssh_settings", "power_off_command":
		default:
			return nil, fmt.Errorf("provider.%s: unknown field; an ssh provider has hosts, ssh_settings and power_off_command", k)
		}
	}
	hosts, ok := c.Provider["hosts"].([]any)
	if !ok || len(hosts) == 0 {
		return nil, fmt.Errorf("provider.hosts: an ssh provider needs the list of its machines: [{address: HOST, port: 22, host_key: ...}, ...]")
	}
	for i, raw := range hosts {
		f := fmt.Sprintf("provider.hosts[%d]", i)
		h := sshprov.Host{Field: f}
		switch v := raw.(type) {
		case string:
			h.Address = v
		case map[string]any:
			for k := range v {
				if k != "address" && k != "port" && k != "host_key" {
					return nil, fmt.Errorf("%s.%s: unknown field; a host has address, port and host_key", f, k)
				}
			}
			h.Address, _ = v["address"].(string)
			h.HostKey, _ = v["host_key"].(string)
			if port, ok := v["port"]; ok {
				n, ok := port.(float64)
				if !ok || n < 1 || n > 65535 || n != float64(int(n)) {
					return nil, fmt.Errorf("%s.port: must be a port number from 1 to 65535", f)
				}
				h.Port = int(n)
			}
		default:
			return nil, fmt.Errorf("%s: must be a host name or {address, port, host_key}", f)
		}
		if h.Address == "" {
			return nil, fmt.Errorf("%s.address: is required", f)
		}
		cfg.Hosts = append(cfg.Hosts, h)
	}
	if c.MaxInstances != nil && *c.MaxInstances > len(cfg.Hosts) {
		return nil, fmt.Errorf("max_instances: %d is more than the %d machines in provider.hosts", *c.MaxInstances, len(cfg.Hosts))
	}
	s, _ := c.Provider["ssh_settings"].(map[string]any)
	str := func(k string) string { v, _ := s[k].(string); return v }
	for k := range s {
		switch k {
		case "admin_username", "admin_password", "ssh_private_key", "ssh_private_key_file", "ssh_private_key_passphrase":
		default:
			return nil, fmt.Errorf("provider.ssh_settings.%s: unknown field; ssh_settings has admin_username, admin_password, ssh_private_key_file and ssh_private_key_passphrase", k)
		}
	}
	if str("admin_password") == "" && str("ssh_private_key") == "" {
		return nil, fmt.Errorf("provider.ssh_settings: give ssh_private_key_file (recommended) or admin_password to log in with")
	}
	cfg.Login = sshprov.Login{User: str("admin_username"), Password: secrets.Secret(str("admin_password")),
		PrivateKey: secrets.Secret(str("ssh_private_key")), Passphrase: secrets.Secret(str("ssh_private_key_passphrase")), Field: "provider.ssh_settings"}
	cfg.PowerOff, _ = c.Provider["power_off_command"].(string)
	return sshprov.New(cfg)
}
