package ssh

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSettings(t *testing.T) {
	login := map[string]any{"admin_username": "ferry", "ssh_private_key": "KEY"}
	for _, c := range []struct {
		name    string
		block   map[string]any
		want    Settings
		wantErr string
	}{
		{name: "fleet", block: map[string]any{"type": "ssh", "hosts": []any{"a.lab", map[string]any{"address": "b.lab", "port": 2222.0, "host_key": "TOFU"}},
			"ssh_settings": login, "power_off_command": "sudo poweroff"},
			want: Settings{
				Hosts:    []Host{{Address: "a.lab", Field: "provider.hosts[0]"}, {Address: "b.lab", Port: 2222, HostKey: "TOFU", Field: "provider.hosts[1]"}},
				Login:    Login{User: "ferry", PrivateKey: "KEY", Field: "provider.ssh_settings"},
				PowerOff: "sudo poweroff"}},
		{name: "port as YAML gives it", block: map[string]any{"hosts": []any{map[string]any{"address": "b", "port": 22}}, "ssh_settings": login},
			want: Settings{Hosts: []Host{{Address: "b", Port: 22, Field: "provider.hosts[0]"}}, Login: Login{User: "ferry", PrivateKey: "KEY", Field: "provider.ssh_settings"}}},
		{name: "no hosts", block: map[string]any{"ssh_settings": login}, wantErr: "provider.hosts: an ssh provider needs the list of its machines"},
		{name: "empty hosts", block: map[string]any{"hosts": []any{}, "ssh_settings": login}, wantErr: "provider.hosts: an ssh provider needs the list"},
		{name: "hosts a string", block: map[string]any{"hosts": "a", "ssh_settings": login}, wantErr: "provider.hosts: must be a list of machines"},
		{name: "typo", block: map[string]any{"host": []any{"a"}}, wantErr: "provider.host: unknown key; did you mean hosts?"},
		{name: "host typo", block: map[string]any{"hosts": []any{"a", map[string]any{"adress": "b"}}, "ssh_settings": login}, wantErr: "provider.hosts[1].adress: unknown key; did you mean address?"},
		{name: "host a number", block: map[string]any{"hosts": []any{7.0}, "ssh_settings": login}, wantErr: "provider.hosts[0]: must be a host name or {address, port, host_key}"},
		{name: "host without address", block: map[string]any{"hosts": []any{map[string]any{"port": 22.0}}, "ssh_settings": login}, wantErr: "provider.hosts[0].address: is required"},
		{name: "port a string", block: map[string]any{"hosts": []any{map[string]any{"address": "b", "port": "22"}}, "ssh_settings": login}, wantErr: "provider.hosts[0].port: must be a whole number, not a string"},
		{name: "port out of range", block: map[string]any{"hosts": []any{map[string]any{"address": "b", "port": 70000.0}}, "ssh_settings": login}, wantErr: "provider.hosts[0].port: must be a port number from 1 to 65535 (got 70000)"},
		{name: "no login", block: map[string]any{"hosts": []any{"a"}}, wantErr: "provider.ssh_settings: give ssh_private_key_file (recommended) or admin_password"},
		{name: "login typo", block: map[string]any{"hosts": []any{"a"}, "ssh_settings": map[string]any{"admin_pasword": "hunter2-secret"}},
			wantErr: "provider.ssh_settings.admin_pasword: unknown key; did you mean admin_password?"},
		{name: "password a number", block: map[string]any{"hosts": []any{"a"}, "ssh_settings": map[string]any{"admin_password": 12345678.0}},
			wantErr: "provider.ssh_settings.admin_password: must be a string"},
		{name: "power off a list", block: map[string]any{"hosts": []any{"a"}, "ssh_settings": login, "power_off_command": []any{"x"}},
			wantErr: "provider.power_off_command: must be a string, not a list"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseSettings(c.block)
			if c.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one starting %q", err, c.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("the error quotes a password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("settings (-want +got):\n%s", d)
			}
		})
	}
}
