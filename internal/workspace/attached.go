package workspace

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/nodeproto"
	"github.com/ferry-ml/ferry/internal/provider"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/sizes"
	"github.com/ferry-ml/ferry/internal/spec"
)

// Attached machines (type virtualmachine) are pools of one node whose
// machine the team already has: the ssh node provider logs in, copies the
// ferry binary and starts an agent there. An ssh fleet (a cluster with
// provider: {type: ssh, hosts: [...]}) is the same with several machines.
//
// Their passwords, private keys and passphrases are sealed with the
// workspace key before the compute is stored (SealCompute), opened only
// where the provider is made (OpenCompute), and redacted from every view
// (redactCompute).

// attachedSize is the "size" of an attached machine: whatever the machine
// is. It has no cores to count against a quota (the team owns the machine)
// and no GPU slots to share out: a job there sees the machine's GPUs.
var attachedSize = sizes.Size{Name: "attached", Family: "attached"}

// secretField is one secret of a compute: where it sits and how to read
// and write it.
type secretField struct {
	path string // as the user writes it, e.g. ssh_settings.admin_password
	ptr  *string
}

// secretFields lists c's secrets that are set: the VM's ssh_settings, a
// fleet's provider.ssh_settings and a Kubernetes compute's kubeconfig and
// registry password. Fleet values are written back into the
// provider map by the returned function.
func secretFields(c *spec.Compute) ([]secretField, func()) {
	var out []secretField
	if c.KubeconfigContent != "" {
		out = append(out, secretField{"kubeconfig_content", &c.KubeconfigContent})
	}
	if rc := c.RegistryCredentials; rc != nil && rc.Password != "" {
		out = append(out, secretField{"registry_credentials.password", &rc.Password})
	}
	if s := c.SSHSettings; s != nil {
		for _, f := range []secretField{
			{"ssh_settings.admin_password", &s.AdminPassword},
			{"ssh_settings.ssh_private_key", &s.SSHPrivateKey},
			{"ssh_settings.ssh_private_key_passphrase", &s.SSHPrivateKeyPassphrase},
		} {
			if *f.ptr != "" {
				out = append(out, f)
			}
		}
	}
	m, _ := c.Provider["ssh_settings"].(map[string]any)
	vals := map[string]*string{}
	for _, k := range []string{"admin_password", "ssh_private_key", "ssh_private_key_passphrase"} {
		if v, ok := m[k].(string); ok && v != "" {
			vals[k] = &v
			out = append(out, secretField{"provider.ssh_settings." + k, vals[k]})
		}
	}
	return out, func() {
		for k, v := range vals {
			m[k] = *v
		}
	}
}

// secretLabel binds a sealed value to its compute and field, so that a
// sealed value moved to another field or compute does not open.
func secretLabel(compute, path string) string { return "compute/" + compute + "/" + path }

// SealCompute replaces the secrets of c by values sealed with k. Values
// already sealed are left as they are.
func SealCompute(k *secrets.Key, c *spec.Compute) error {
	fields, write := secretFields(c)
	for _, f := range fields {
		if secrets.IsSealed(*f.ptr) {
			continue
		}
		sealed, err := k.Seal([]byte(*f.ptr), secretLabel(c.Name, f.path))
		if err != nil {
			return err
		}
		*f.ptr = sealed
	}
	write()
	return nil
}

// OpenCompute returns a copy of c with its sealed secrets opened, for the
// one place that logs in with them (the provider). The copy must not be
// stored, logged or returned.
func OpenCompute(k *secrets.Key, c *spec.Compute) (*spec.Compute, error) {
	cp, err := cloneCompute(c)
	if err != nil {
		return nil, err
	}
	fields, write := secretFields(cp)
	for _, f := range fields {
		if !secrets.IsSealed(*f.ptr) {
			continue
		}
		if k == nil {
			return nil, fmt.Errorf("%s is sealed, but this server has no workspace key", f.path)
		}
		plain, err := k.Open(*f.ptr, secretLabel(c.Name, f.path))
		if err != nil {
			return nil, fmt.Errorf("%s: %w (was the workspace key replaced?)", f.path, err)
		}
		*f.ptr = string(plain)
	}
	write()
	return cp, nil
}

// redactCompute replaces c's secrets by secrets.Redacted, for views.
func redactCompute(c *spec.Compute) {
	fields, write := secretFields(c)
	for _, f := range fields {
		*f.ptr = secrets.Redacted
	}
	write()
}

func cloneCompute(c *spec.Compute) (*spec.Compute, error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var cp spec.Compute
	if err := json.Unmarshal(raw, &cp); err != nil {
		return nil, err
	}
	return &cp, nil
}

// usesSSH reports whether the machines of compute c, of pool type pt, are
// reached over SSH: an attached machine, or a fleet.
func usesSSH(pt *compute.Pool, c *spec.Compute) bool {
	t, _ := c.Provider["type"].(string)
	return pt.Attached || t == "ssh"
}

// attach prepares an attached machine or an ssh fleet for storing: seals
// its secrets, logs in to every machine once (so that a wrong password or
// host key is refused now, not at the first job) and pins the host keys of
// machines configured trust-on-first-use.
func (s *Service) attach(ctx context.Context, pt *compute.Pool, c *spec.Compute) error {
	if s.cfg.Secrets == nil {
		return apperr.Invalid("type: this server has no workspace key, so it cannot keep SSH secrets; start it with a data dir it can write")
	}
	if pt.Attached && c.SSHSettings != nil && c.SSHSettings.SSHPrivateKeyFile != "" && c.SSHSettings.SSHPrivateKey == "" {
		return apperr.Invalid("ssh_settings.ssh_private_key_file: the server does not read files named by a request; send the key's content as ssh_settings.ssh_private_key (the ferry CLI reads the file for you)")
	}
	if err := SealCompute(s.cfg.Secrets, c); err != nil {
		return err
	}
	if s.cfg.Providers == nil {
		return apperr.Invalid("type: this server has no node providers")
	}
	prov, err := s.cfg.Providers(c)
	if err != nil {
		return apperr.Invalid("%v", err)
	}
	ch, ok := prov.(provider.Checker)
	if !ok {
		return nil
	}
	pins, err := ch.Check(ctx)
	if err != nil {
		// A *provider.CheckError names the field and holds no secret.
		return &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	for i, pin := range pins {
		if pin == "" {
			continue
		}
		if pt.Attached {
			c.HostKey = pin
			continue
		}
		hosts, _ := c.Provider["hosts"].([]any)
		if i < len(hosts) {
			h, ok := hosts[i].(map[string]any)
			if !ok {
				h = map[string]any{"address": hosts[i]}
				hosts[i] = h
			}
			h["host_key"] = pin
		}
	}
	return nil
}

// checkSetupContent refuses a setup script given by path whose text did not
// come with it: the CLI sends the script's content, as the server does not
// read files named by a request.
func checkSetupContent(c *spec.Compute) error {
	for _, k := range []string{"creation_script", "startup_script"} {
		m, _ := c.SetupScripts[k].(map[string]any)
		if p, _ := m["path"].(string); p != "" {
			if content, _ := m["content"].(string); content == "" {
				return apperr.Invalid("setup_scripts.%s.path: the server does not read files named by a request; send the script's text as setup_scripts.%s.content (the ferry CLI reads %s next to the compute file for you)", k, k, p)
			}
		}
	}
	return nil
}

// admitAttachedGPUs refuses a job that asks for more GPUs than attached
// machine c has, as its agent reported them when it joined. Before its
// agent has joined, what the machine has is not known, and the job is
// taken.
func (s *Service) admitAttachedGPUs(ctx context.Context, pt *compute.Pool, c *spec.Compute, j *spec.Job) error {
	if n, _ := j.Resources.GPUs(); n == 0 {
		return nil
	}
	nodes, err := s.st.ListNodes(ctx, c.Name)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		var f nodeproto.Facts
		if n.Joined.IsZero() || json.Unmarshal(n.Facts, &f) != nil {
			continue
		}
		return refuseGPUs(j, pt, c, "the machine at "+c.Address, len(f.GPUs))
	}
	return nil
}
