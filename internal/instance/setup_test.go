package instance

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ferry-ml/ferry/internal/spec"
)

func TestParseSetupScripts(t *testing.T) {
	for _, viaJSON := range []bool{false, true} {
		got, err := ParseSetupScripts(fromYAML(t, `
creation_script: {path: Users/me/create.sh, timeout_minutes: 45}
startup_script: {command: "pip install -r requirements.txt"}
`, viaJSON))
		if err != nil {
			t.Fatal(err)
		}
		want := SetupScripts{
			Creation: &SetupScript{Path: "Users/me/create.sh", Timeout: 45 * time.Minute},
			Startup:  &SetupScript{Command: "pip install -r requirements.txt", Timeout: DefaultScriptTimeout},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("viaJSON=%v (-want +got):\n%s", viaJSON, diff)
		}
	}
	got, err := ParseSetupScripts(nil)
	if err != nil || got != (SetupScripts{}) {
		t.Errorf("ParseSetupScripts(nil) = %+v, %v; want none", got, err)
	}
}

func TestParseSetupScriptsErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown script", "shutdown_script: {path: a.sh}", []string{"setup_scripts.shutdown_script: unknown field; setup_scripts has creation_script and startup_script"}},
		{"not a mapping", "startup_script: run.sh", []string{"setup_scripts.startup_script: must be a mapping with path (a script in the workspace files) or command, and optionally timeout_minutes"}},
		{"neither path nor command", "startup_script: {timeout_minutes: 5}", []string{"setup_scripts.startup_script: give path (a script in the workspace files) or command (a shell command line)"}},
		{"absolute path", "creation_script: {path: /etc/rc.local}", []string{`setup_scripts.creation_script.path: "/etc/rc.local" is absolute; give a path relative to the workspace files, e.g. Users/me/setup.sh`}},
		{"escaping path", "creation_script: {path: Users/../../x.sh}", []string{`setup_scripts.creation_script.path: "Users/../../x.sh" leaves the workspace files; give a path inside them`}},
		{"timeouts", "creation_script: {path: a.sh, timeout_minutes: 0}\nstartup_script: {path: b.sh, timeout_minutes: 181, args: x}", []string{
			"setup_scripts.creation_script.timeout_minutes: must be a whole number of minutes from 1 to 180, got 0",
			"setup_scripts.startup_script.args: unknown field; known here: path, command, timeout_minutes, content",
			"setup_scripts.startup_script.timeout_minutes: must be a whole number of minutes from 1 to 180, got 181"}},
		{"path not a string", "startup_script: {path: 3}", []string{
			"setup_scripts.startup_script.path: must be a string",
			"setup_scripts.startup_script: give path (a script in the workspace files) or command (a shell command line)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSetupScripts(fromYAML(t, tt.yaml, false))
			var es spec.Errors
			if !errors.As(err, &es) {
				t.Fatalf("error = %v; want a spec.Errors", err)
			}
			var got []string
			for _, e := range es {
				got = append(got, e.Error())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseConfig(t *testing.T) {
	c, err := spec.ParseCompute([]byte(`
name: dev-box
type: computeinstance
idle_time_before_shutdown_minutes: 30
schedules:
  compute_start_stop:
    - action: stop
      trigger: {type: cron, expression: "0 18 * * 1-5", time_zone: Pacific Standard Time}
setup_scripts:
  startup_script: {path: start.sh}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.IdleTimeBeforeShutdown != 30*time.Minute || len(cfg.Schedules) != 1 || cfg.SetupScripts.Startup == nil {
		t.Errorf("ParseConfig = %+v", cfg)
	}

	bad := &spec.Compute{Name: "dev-box", Type: "computeinstance", IdleTimeBeforeShutdownMins: new(10),
		Schedules: map[string]any{"compute_start_stop": []any{map[string]any{"action": "stop", "trigger": map[string]any{"type": "cron", "expression": "0 18 * *"}}}}}
	_, err = ParseConfig(bad)
	var es spec.Errors
	if !errors.As(err, &es) {
		t.Fatalf("error = %v; want a spec.Errors", err)
	}
	want := "2 problems:\n" +
		"  idle_time_before_shutdown_minutes: must be from 15 to 4320 minutes (3 days), got 10\n" +
		`  schedules.compute_start_stop[0].trigger.expression: cron "0 18 * *": has 4 fields; write five: minute hour day-of-month month day-of-week, e.g. "0 18 * * 1-5" (seconds and @-macros are not supported)`
	if diff := cmp.Diff(want, err.Error()); diff != "" {
		t.Errorf("error (-want +got):\n%s", diff)
	}
	for _, m := range []int{15, 4320} {
		if _, err := IdleTime(&m); err != nil {
			t.Errorf("IdleTime(%d): %v", m, err)
		}
	}
	if _, err := IdleTime(new(4321)); err == nil {
		t.Errorf("IdleTime(4321) accepted")
	}
}
