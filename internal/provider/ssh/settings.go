package ssh

import (
	"github.com/ferry-ml/ferry/internal/provider"
	"github.com/ferry-ml/ferry/internal/secrets"
)

// Settings are what a compute's provider: block says to an ssh fleet:
// {type: ssh, hosts: [...], ssh_settings: {...}, power_off_command}. An
// attached machine (type virtualmachine) has no provider block; its
// settings are the compute's own fields.
type Settings struct {
	Hosts    []Host // each with Field set, e.g. provider.hosts[2]
	Login    Login  // Field is provider.ssh_settings
	PowerOff string
}

// Keys are the keys an ssh provider block may have; HostKeys and LoginKeys
// those of one of its hosts and of its ssh_settings.
var (
	Keys      = []string{"type", "hosts", "ssh_settings", "power_off_command"}
	HostKeys  = []string{"address", "port", "host_key"}
	LoginKeys = []string{"admin_username", "admin_password", "ssh_private_key", "ssh_private_key_file", "ssh_private_key_passphrase"}
)

// ParseSettings reads a provider block. It refuses unknown keys and values
// of the wrong type, naming the field (provider.hosts[1].port), and never
// quotes a value of ssh_settings in an error. The secrets in ssh_settings
// may still be sealed; it only checks that they are there.
func ParseSettings(block map[string]any) (Settings, error) {
	f := provider.Root
	if err := provider.CheckKeys(f, block, Keys...); err != nil {
		return Settings{}, err
	}
	var s Settings
	hf := f.Key("hosts")
	raw, ok := block["hosts"]
	hosts, isList := raw.([]any)
	if !ok || raw == nil || (isList && len(hosts) == 0) {
		return Settings{}, hf.Errorf("an ssh provider needs the list of its machines: [{address: HOST, port: 22, host_key: ...}, ...]")
	}
	if !isList {
		return Settings{}, hf.Errorf("must be a list of machines: [{address: HOST, port: 22, host_key: ...}, ...]")
	}
	for i, raw := range hosts {
		h, err := parseHost(hf.Index(i), raw)
		if err != nil {
			return Settings{}, err
		}
		s.Hosts = append(s.Hosts, h)
	}
	lf := f.Key("ssh_settings")
	m, err := provider.Map(f, block, "ssh_settings")
	if err != nil {
		return Settings{}, err
	}
	if err := provider.CheckKeys(lf, m, LoginKeys...); err != nil {
		return Settings{}, err
	}
	str := map[string]string{}
	for _, k := range LoginKeys {
		if str[k], err = provider.String(lf, m, k); err != nil {
			return Settings{}, err
		}
	}
	if str["admin_password"] == "" && str["ssh_private_key"] == "" {
		return Settings{}, lf.Errorf("give ssh_private_key_file (recommended) or admin_password to log in with")
	}
	s.Login = Login{User: str["admin_username"], Password: secrets.Secret(str["admin_password"]),
		PrivateKey: secrets.Secret(str["ssh_private_key"]), Passphrase: secrets.Secret(str["ssh_private_key_passphrase"]),
		Field: string(lf)}
	if s.PowerOff, err = provider.String(f, block, "power_off_command"); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// parseHost reads one entry of hosts: a host name, or {address, port,
// host_key}.
func parseHost(f provider.Field, raw any) (Host, error) {
	h := Host{Field: string(f)}
	switch v := raw.(type) {
	case string:
		h.Address = v
	case map[string]any:
		if err := provider.CheckKeys(f, v, HostKeys...); err != nil {
			return Host{}, err
		}
		var err error
		if h.Address, err = provider.String(f, v, "address"); err != nil {
			return Host{}, err
		}
		if h.HostKey, err = provider.String(f, v, "host_key"); err != nil {
			return Host{}, err
		}
		if p, ok := v["port"]; ok && p != nil {
			n, err := provider.Int(f.Key("port"), p)
			if err != nil {
				return Host{}, err
			}
			if n < 1 || n > 65535 {
				return Host{}, f.Key("port").Errorf("must be a port number from 1 to 65535 (got %d)", n)
			}
			h.Port = n
		}
	default:
		return Host{}, f.Errorf("must be a host name or {address, port, host_key}")
	}
	if h.Address == "" {
		return Host{}, f.Key("address").Errorf("is required")
	}
	return h, nil
}
