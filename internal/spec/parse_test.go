package spec

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseFullJob(t *testing.T) {
	data, err := os.ReadFile("testdata/full-job.yml")
	if err != nil {
		t.Fatal(err)
	}
	j, err := ParseJob(data)
	if err != nil {
		t.Fatal(err)
	}
	lr := "0.01"
	flag := "true"
	want := map[string]Input{
		"data": {Type: "uri_folder", Path: "./data", Mode: "ro_mount"},
		"lr":   {Value: &lr},
		"flag": {Value: &flag},
	}
	if diff := cmp.Diff(want, j.Inputs); diff != "" {
		t.Errorf("inputs (-want +got):\n%s", diff)
	}
	if j.ComputeName() != "cpu-cluster" || j.Environment.Ref != "azureml:sklearn-env:3" || j.Limits.Timeout != 3600 ||
		j.Resources.InstanceCount != 2 || j.Distribution.ProcessCountPerInstance != 4 || j.Services["tb"].Port != 6006 {
		t.Errorf("parsed job = %+v", j)
	}
	// JSON (the API's form) round-trips to the same job.
	raw, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeJobJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(j, back); diff != "" {
		t.Errorf("JSON round trip (-yaml +json):\n%s", diff)
	}
}

func TestJobErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"empty", "", []string{"empty"}},
		{"not yaml", "command: [x\n", []string{"not valid YAML", "line"}},
		{"not a mapping", "- a\n- b\n", []string{"mapping"}},
		{"unknown field with hint", "command: x\ncomand: y\n", []string{"comand", "line 2", `did you mean "command"`}},
		{"nested unknown", "command: x\nlimits:\n  timout: 5\n", []string{"limits.timout", "timeout"}},
		{"wrong type", "command: x\nlimits:\n  timeout: soon\n", []string{"limits.timeout", "whole number", "soon"}},
		{"list for string", "command: [a, b]\n", []string{"command", "a list"}},
		{"missing command", "name: j\n", []string{"command", "required"}},
		{"bad type", "type: pipeline\ncommand: x\n", []string{"type", "pipeline"}},
		{"bad name", "name: -bad\ncommand: x\n", []string{"name"}},
		{"bad compute", "command: x\ncompute: a/b\n", []string{"compute"}},
		{"undeclared input", "command: echo ${{inputs.x}}\n", []string{"inputs.x", "none"}},
		{"undeclared output", "command: echo ${{outputs.o}}\noutputs: {m: {type: uri_folder}}\n", []string{"outputs.o", "m"}},
		{"other expression", "command: echo ${{search_space.lr}}\n", []string{"search_space.lr"}},
		{"input type", "command: x\ninputs: {d: {type: blob, path: p}}\n", []string{"inputs.d.type", "uri_folder"}},
		{"input path", "command: x\ninputs: {d: {type: uri_file}}\n", []string{"inputs.d.path"}},
		{"input mode", "command: x\ninputs: {d: {type: uri_file, path: p, mode: rw}}\n", []string{"inputs.d.mode"}},
		{"output type", "command: x\noutputs: {o: {type: mltable}}\n", []string{"outputs.o.type"}},
		{"reserved var", "command: x\nenvironment_variables: {FERRY_JOB_ID: x}\n", []string{"environment_variables.FERRY_JOB_ID"}},
		{"bad var", "command: x\nenvironment_variables: {1X: x}\n", []string{"environment_variables.1X"}},
		{"negative timeout", "command: x\nlimits: {timeout: -1}\n", []string{"limits.timeout"}},
		{"instance count", "command: x\nresources: {instance_count: -2}\n", []string{"resources.instance_count"}},
		{"shm", "command: x\nresources: {shm_size: lots}\n", []string{"resources.shm_size"}},
		{"distribution type", "command: x\ndistribution: {type: horovod}\n", []string{"distribution.type"}},
		{"tf with processes", "command: x\ndistribution: {type: tensorflow, process_count_per_instance: 2}\n", []string{"process_count_per_instance"}},
		{"service type", "command: x\nservices: {s: {type: rdp}}\n", []string{"services.s.type"}},
		{"job tier", "command: x\nqueue_settings: {job_tier: gold}\n", []string{"queue_settings.job_tier"}},
		{"env ref", "command: x\nenvironment: 'bad ref!'\n", []string{"environment"}},
		{"env two kinds", "command: x\nenvironment: {image: a, python: {requirements: r.txt}}\n", []string{"environment", "only one"}},
		{"env interpreter", "command: x\nenvironment: {image: a, interpreter_path: /usr/bin/python3}\n", []string{"environment.interpreter_path"}},
		{"env build path", "command: x\nenvironment: {build: {dockerfile_path: D}}\n", []string{"environment.build.path"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseJob([]byte(c.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestAllProblemsAreReportedAtOnce(t *testing.T) {
	_, err := ParseJob([]byte("limits: {timeout: -1}\nname: -x\n"))
	var es Errors
	if !errors.As(err, &es) || len(es) != 3 {
		t.Fatalf("want 3 field errors (command, name, timeout), got %v", err)
	}
}

func TestSetOverrides(t *testing.T) {
	base := "command: echo ${{inputs.n}}\ninputs:\n  n: 1\nlimits:\n  timeout: 10\n"
	j, err := ParseJobWithSet([]byte(base), []string{
		"limits.timeout=60", "inputs.n=5", "environment_variables.FOO=bar baz", "compute=azureml:gpu", "tags.team=ml", "name=run-2",
	})
	if err != nil {
		t.Fatal(err)
	}
	if j.Limits.Timeout != 60 || *j.Inputs["n"].Value != "5" || j.EnvironmentVariables["FOO"] != "bar baz" ||
		j.ComputeName() != "gpu" || j.Tags["team"] != "ml" || j.Name != "run-2" {
		t.Fatalf("job after --set: %+v", j)
	}
	for _, bad := range []string{"novalue", "=x", "limits..timeout=1", "command.x=1", "limits.timeout=soon"} {
		if _, err := ParseJobWithSet([]byte(base), []string{bad}); err == nil {
			t.Errorf("--set %s accepted", bad)
		}
	}
}

func TestDecodeJobJSON(t *testing.T) {
	j, err := DecodeJobJSON([]byte(`{"command": "echo ${{inputs.n}}", "inputs": {"n": 3, "s": "x", "b": false}, "environment": "env@latest"}`))
	if err != nil {
		t.Fatal(err)
	}
	if *j.Inputs["n"].Value != "3" || *j.Inputs["s"].Value != "x" || *j.Inputs["b"].Value != "false" || j.Environment.Ref != "env@latest" {
		t.Fatalf("job = %+v", j)
	}
	for _, c := range []struct{ body, want string }{
		{`{"command": "x", "bogus": 1}`, "bogus"},
		{`{"command": "x", "limits": {"timeout": "soon"}}`, "limits.timeout"},
		{`{"command": 5}`, "command"},
		{`{"command": "x"} {}`, "more than one"},
		{`not json`, "JSON"},
	} {
		if _, err := DecodeJobJSON([]byte(c.body)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to mention %q", c.body, err, c.want)
		}
	}
}

func TestComputeFiles(t *testing.T) {
	data, err := os.ReadFile("testdata/cluster.yml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseCompute(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.Type != "amlcompute" || *c.MaxInstances != 4 || *c.IdleTimeBeforeScaleDown != 120 {
		t.Fatalf("cluster = %+v", c)
	}
	d, err := ParseCompute([]byte("name: small\ntype: amlcompute\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Size != "Standard_DS3_v2" || *d.MinInstances != 0 || *d.MaxInstances != 1 || *d.IdleTimeBeforeScaleDown != 120 || d.Tier != "dedicated" {
		t.Errorf("defaults = %+v", d)
	}
	for _, c := range []struct{ yaml, want string }{
		{"type: local\n", "name"},
		{"name: x y\ntype: local\n", "name"},
		{"name: ok1\ntype: cloud\n", "type"},
		{"name: ok1\ntype: local\nmax_instances: 3\n", "max_instances"},
		{"name: ok1\ntype: local\ncapacity: -1\n", "capacity"},
		{"name: gpu-cluster\ntype: amlcompute\nmin_instances: 2\nmax_instances: 0\n", "max_instances must be ≥ min_instances (got 0 < 2)"},
		{"name: gpu-cluster\ntype: amlcompute\ntier: gold\n", "tier"},
		{"name: gpu-cluster\ntype: amlcompute\ncapacity: 2\n", "capacity"},
		{"name: dev1\ntype: computeinstance\nidle_time_before_shutdown_minutes: 5\n", "idle_time_before_shutdown_minutes"},
		{"name: box\ntype: virtualmachine\n", "address"},
		{"name: box\ntype: virtualmachine\naddress: h\nssh_settings: {admin_username: u}\n", "admin_password"},
		{"name: ok1\ntype: local\nsizee: x\n", `did you mean "size"`},
	} {
		if _, err := ParseCompute([]byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err %v, want it to mention %q", c.yaml, err, c.want)
		}
	}
	if _, err := DecodeComputeJSON([]byte(`{"name": "one", "type": "local", "capacity": 2}`)); err != nil {
		t.Error(err)
	}
}

func FuzzParseJob(f *testing.F) {
	for _, p := range []string{"testdata/full-job.yml"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("command: echo ${{inputs.a}}\ninputs: {a: 1}\n"))
	f.Add([]byte("command: x\nenvironment: {image: a, conda_file: c.yml}\n"))
	f.Add([]byte("a: &x [1]\nb: *x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := ParseJob(data)
		if err != nil {
			return
		}
		// Whatever the YAML parser accepts, the API accepts too, unchanged.
		raw, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeJobJSON(raw)
		if err != nil {
			t.Fatalf("accepted YAML, refused its JSON: %v\n%s", err, raw)
		}
		if diff := cmp.Diff(j, back); diff != "" {
			t.Fatalf("round trip changed the job:\n%s", diff)
		}
	})
}

func FuzzParseCompute(f *testing.F) {
	data, err := os.ReadFile("testdata/cluster.yml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("name: one\ntype: local\ncapacity: 3\n"))
	f.Add([]byte("name: box\ntype: virtualmachine\naddress: h\nssh_settings: {admin_username: u, admin_password: p}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCompute(data)
		if err != nil {
			return
		}
		raw, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeComputeJSON(raw)
		if err != nil {
			t.Fatalf("accepted YAML, refused its JSON: %v\n%s", err, raw)
		}
		if diff := cmp.Diff(c, back); diff != "" {
			t.Fatalf("round trip changed the compute:\n%s", diff)
		}
	})
}
