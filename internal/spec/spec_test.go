package spec

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

func ptr[T any](v T) *T { return &v }

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func glob(t testing.TB, pattern string) []string {
	t.Helper()
	paths, err := filepath.Glob(pattern)
	if err != nil || len(paths) == 0 {
		t.Fatalf("no files match %s (%v)", pattern, err)
	}
	return paths
}

// fieldErrors returns the problems in err, failing the test when err is not
// (or does not wrap) an Errors.
func fieldErrors(t *testing.T, err error) Errors {
	t.Helper()
	var es Errors
	if !errors.As(err, &es) || len(es) == 0 {
		t.Fatalf("error %v (%T) is not a non-empty Errors", err, err)
	}
	return es
}

// wantProblem fails unless err has a problem about field whose text
// contains every one of want.
func wantProblem(t *testing.T, err error, field string, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want a problem with %s", field)
	}
	for _, e := range fieldErrors(t, err) {
		if e.Field != field {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(e.Error(), w)
		}
		if ok {
			return
		}
	}
	t.Errorf("no problem with field %q mentioning %q in:\n%v", field, want, err)
}

// roundTrip checks that a parsed job comes back unchanged from its JSON
// (through DecodeJobJSON) and from its YAML (through ParseJob).
func roundTrip(t *testing.T, j *Job) {
	t.Helper()
	raw, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeJobJSON(raw)
	if err != nil {
		t.Fatalf("DecodeJobJSON of the parsed job: %v\n%s", err, raw)
	}
	if diff := cmp.Diff(j, back); diff != "" {
		t.Errorf("JSON round trip changed the job (-yaml +json):\n%s", diff)
	}
	y, err := yaml.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseJob(y)
	if err != nil {
		t.Fatalf("ParseJob of the job written as YAML: %v\n%s", err, y)
	}
	if diff := cmp.Diff(j, again); diff != "" {
		t.Errorf("YAML round trip changed the job (-before +after):\n%s\n%s", diff, y)
	}
}

func TestTestdataJobsParseAndRoundTrip(t *testing.T) {
	paths := glob(t, "testdata/job-*.yml")
	if examples, _ := filepath.Glob("../../examples/*/job.yml"); len(examples) > 0 {
		paths = append(paths, examples...)
	}
	for _, p := range paths {
		t.Run(filepath.Base(filepath.Dir(p))+"/"+filepath.Base(p), func(t *testing.T) {
			j, err := ParseJob(readFile(t, p))
			if err != nil {
				t.Fatal(err)
			}
			if err := j.Validate(); err != nil {
				t.Errorf("Validate of a parsed job: %v", err)
			}
			roundTrip(t, j)
		})
	}
}

func TestParseFullJob(t *testing.T) {
	j, err := ParseJob(readFile(t, "testdata/job-full.yml"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Job{
		Schema:               "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json",
		Type:                 "command",
		Name:                 "full_job-1",
		DisplayName:          "everything",
		ExperimentName:       "exp",
		Description:          "a job that uses every field Ferry reads",
		Tags:                 map[string]string{"team": "ml", "stage": "dev"},
		Properties:           map[string]string{"source": "ci"},
		Code:                 "./src",
		Command:              "python train.py --data ${{inputs.data}} --lr ${{inputs.lr}} --out ${{outputs.model}}",
		Environment:          &Environment{Ref: "azureml:sklearn-env:3"},
		EnvironmentVariables: map[string]string{"MY_FLAG": "1", "RETRIES": "3"},
		Compute:              "azureml:cpu-cluster",
		Inputs: map[string]Input{
			"data":  {Type: "uri_folder", Path: "./data", Mode: "ro_mount"},
			"lr":    {Value: ptr("0.01")},
			"flag":  {Value: ptr("true")},
			"label": {Value: ptr("007")},
		},
		Outputs: map[string]Output{"model": {Type: "uri_folder", Mode: "rw_mount"}},
		Limits:  &Limits{Timeout: 3600},
		Resources: &Resources{
			InstanceCount: 2, InstanceType: "Standard_NC6", ShmSize: "2g", DockerArgs: "--ipc=host",
			// Free-form values are as JSON has them: numbers float64,
			// timestamps the text written.
			Properties: map[string]any{"priority": 3.0, "zones": []any{1.0, 2.0}, "when": "2024-01-02"},
		},
		Distribution: &Distribution{Type: "pytorch", ProcessCountPerInstance: 4},
		Services: map[string]Service{
			"tb":    {Type: "tensor_board", Port: 6006, Nodes: "all"},
			"shell": {Type: "ssh", Properties: map[string]any{"ssh_public_key": "ssh-ed25519 AAAA"}},
		},
		QueueSettings: &QueueSettings{JobTier: "standard", Priority: "high"},
		Identity:      &Identity{Type: "user_identity"},
	}
	if diff := cmp.Diff(want, j); diff != "" {
		t.Errorf("parsed job (-want +got):\n%s", diff)
	}
	if j.ComputeName() != "cpu-cluster" {
		t.Errorf("ComputeName = %q", j.ComputeName())
	}
}

func TestAnchorsAndMerges(t *testing.T) {
	j, err := ParseJob(readFile(t, "testdata/job-anchors.yml"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"team": "vision", "stage": "prod", "OMP_NUM_THREADS": "4"}
	if diff := cmp.Diff(want, j.EnvironmentVariables); diff != "" {
		t.Errorf("merged environment_variables (-want +got):\n%s", diff)
	}
	if got := *j.Inputs["warmup"].Value; got != "10" {
		t.Errorf("aliased input = %q, want 10", got)
	}
}

func TestAzureExampleJob(t *testing.T) {
	j, err := ParseJob(readFile(t, "testdata/job-azure-example.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if j.Type != "command" {
		t.Errorf("type = %q, want command filled in", j.Type)
	}
	name, version, latest, ok := j.Environment.RefParts()
	if name != "AzureML-acpt-pytorch-2.2-cuda12.1" || version != "" || !latest || !ok {
		t.Errorf("RefParts = %q %q %v %v", name, version, latest, ok)
	}
	if want := "python train.py --epochs ${{inputs.epochs}} --learning-rate ${{inputs.learning_rate}} --data-dir ${{inputs.cifar}}"; j.Command != want {
		t.Errorf("command = %q", j.Command)
	}
	if j.Inputs["cifar"].Path != "azureml:cifar-10-example@latest" || *j.Inputs["epochs"].Value != "1" {
		t.Errorf("inputs = %+v", j.Inputs)
	}
}

// valid is a job that passes; the rule tables change one thing in it.
const valid = "command: python train.py\n"

func TestJobRulesAccept(t *testing.T) {
	for _, c := range []struct{ name, yaml string }{
		{"minimal", valid},
		{"type command", "type: command\n" + valid},
		{"name", "name: Run_1-b\n" + valid},
		{"name of 255", "name: " + strings.Repeat("a", 255) + "\n" + valid},
		{"compute local", "compute: local\n" + valid},
		{"compute name", "compute: gpu_cluster-2\n" + valid},
		{"compute azureml", "compute: azureml:gpu-cluster\n" + valid},
		{"references", "command: cp ${{inputs.src}} ${{ outputs.dst }}\ninputs: {src: {type: uri_file, path: a.txt}}\noutputs: {dst: {}}\n"},
		{"literal inputs", valid + "inputs: {a: 5, b: 0.5, c: true, d: text, e: '', f: {value: 7}}\n"},
		{"data input without type", valid + "inputs: {d: {path: ./data}}\n"},
		{"every input type and mode", valid + "inputs:\n  a: {type: uri_file, path: p, mode: ro_mount}\n  b: {type: uri_folder, path: p, mode: download}\n  c: {type: mltable, path: p, mode: direct}\n  d: {type: mlflow_model, path: p}\n  e: {type: custom_model, path: p}\n"},
		{"every output type and mode", valid + "outputs:\n  a: {type: uri_folder, mode: rw_mount}\n  b: {type: uri_file, mode: upload}\n  c: {type: mlflow_model, mode: direct}\n  d: {type: custom_model}\n"},
		{"empty output", valid + "outputs: {o: }\n"},
		{"timeout 0", valid + "limits: {timeout: 0}\n"},
		{"instance_count unset", valid + "resources: {instance_count: 0}\n"},
		{"shm sizes", valid + "resources: {shm_size: 512m}\n"},
		{"shm bytes", valid + "resources: {shm_size: \"1073741824\"}\n"},
		{"shm gb", valid + "resources: {shm_size: 8gb}\n"},
		{"mpi", valid + "distribution: {type: mpi, process_count_per_instance: 2}\n"},
		{"tensorflow", valid + "distribution: {type: tensorflow, worker_count: 2, parameter_server_count: 1}\n"},
		{"services", valid + "services: {a: {type: jupyter_lab}, b: {type: vs_code}, c: {type: custom, port: 8080, nodes: \"0\"}}\n"},
		{"queue", valid + "queue_settings: {job_tier: premium, priority: low}\n"},
		{"identity", valid + "identity: {type: aml_token}\n"},
		{"env var underscore", valid + "environment_variables: {_X: \"1\", ferry_lower: ok}\n"},
		{"env name version", valid + "environment: myenv:12\n"},
		{"env latest", valid + "environment: myenv@latest\n"},
		{"env azureml latest", valid + "environment: azureml:my.env_1@latest\n"},
		{"env inline ref", valid + "environment: {ref: 'azureml:myenv:1'}\n"},
		{"env image", valid + "environment: {image: python:3.11}\n"},
		{"env image conda", valid + "environment: {image: python:3.11, conda_file: conda.yml}\n"},
		{"env conda alone", valid + "environment: {conda_file: conda.yml}\n"},
		{"env build", valid + "environment: {build: {path: ./docker}}\n"},
		{"env python", valid + "environment: {python: {requirements: requirements.txt}}\n"},
		{"env user managed", valid + "environment: {user_managed: yes, interpreter_path: /usr/bin/python3}\n"},
		{"null environment", valid + "environment:\n"},
		{"comments", "# a job\n" + valid + "# done\n"},
		{"document marker", "---\n" + valid},
		{"json is yaml", `{"command": "python train.py", "limits": {"timeout": 5}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			j, err := ParseJob([]byte(c.yaml))
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, j)
		})
	}
}

func TestJobRulesReject(t *testing.T) {
	for _, c := range []struct {
		name, yaml, field string
		want              []string
	}{
		// structure and kinds
		{"unknown field", "comand: x\n", "comand", []string{"line 1", `unknown field "comand"`, `did you mean "command"?`}},
		{"unknown nested field", valid + "limits:\n  timout: 5\n", "limits.timout", []string{"line 3", `did you mean "timeout"?`}},
		{"unknown field one level down", valid + "timeout: 5\n", "timeout", []string{`did you mean "limits.timeout"?`}},
		{"unknown field by its v1 name", valid + "source_directory: src\n", "source_directory", []string{`did you mean "code"?`}},
		{"unknown field lists fields", valid + "limits: {deadline: 5}\n", "limits.deadline", []string{"the fields here are timeout"}},
		{"unknown input field", valid + "inputs: {d: {type: uri_file, path: p, datastore: x}}\n", "inputs.d.datastore", []string{"unknown field"}},
		{"unknown environment field", valid + "environment: {image: x, os_type: linux}\n", "environment.os_type", []string{"unknown field"}},
		{"duplicate field", valid + "command: y\n", "command", []string{"line 2", "twice", "line 1"}},
		{"timeout text", valid + "limits:\n  timeout: soon\n", "limits.timeout", []string{"line 3", "whole number of seconds", `"soon"`}},
		{"timeout fraction", valid + "limits: {timeout: 1.5}\n", "limits.timeout", []string{"whole number", `"1.5"`}},
		{"count text", valid + "resources: {instance_count: two}\n", "resources.instance_count", []string{"whole number of nodes"}},
		{"list for a string", "command: [a, b]\n", "command", []string{"single value", "a list"}},
		{"mapping for a string", valid + "compute: {name: x}\n", "compute", []string{"a mapping"}},
		{"bool", valid + "environment: {user_managed: maybe}\n", "environment.user_managed", []string{"true or false", `"maybe"`}},
		{"scalar for a struct", valid + "limits: 30\n", "limits", []string{"mapping of fields (timeout, ", `"30"`}},
		{"list for a map", valid + "tags: [a, b]\n", "tags", []string{"mapping"}},
		{"list for an input", valid + "inputs: {x: [1]}\n", "inputs.x", []string{"a value (epochs: 5)"}},
		{"list for an environment", valid + "environment: [x]\n", "environment", []string{"reference"}},
		{"non-scalar key", valid + "tags: {[a]: b}\n", "tags", []string{"plain names"}},
		// type
		{"pipeline", "type: pipeline\njobs: {}\n", "type", []string{"a pipeline job is read by ParsePipelineJob", "/v1/pipeline-jobs"}},
		{"spark", "type: spark\n" + valid, "type", []string{"only command, sweep and pipeline jobs are supported", "spark"}},
		{"sweep with a command job's fields", "type: sweep\n" + valid, "command", []string{"goes under trial"}},
		{"other type", "type: batch\n" + valid, "type", []string{"must be command", `"batch"`}},
		// command
		{"no command", "name: j\n", "command", []string{"required"}},
		{"blank command", "command: '  '\n", "command", []string{"required"}},
		{"undeclared input", "command: echo ${{inputs.x}}\n", "command", []string{"${{inputs.x}}", "declares no inputs"}},
		{"undeclared input with others", "command: echo ${{inputs.dta}}\ninputs: {data: 1, epochs: 2}\n", "command", []string{`input "dta"`, "declared inputs: data and epochs"}},
		{"undeclared output", "command: echo ${{outputs.o}}\noutputs: {m: {type: uri_folder}}\n", "command", []string{`output "o"`, "declared outputs: m"}},
		{"search space", "command: echo ${{search_space.lr}}\n", "command", []string{"${{search_space.lr}}", "only ${{inputs.NAME}} and ${{outputs.NAME}}"}},
		{"parent expression", "command: echo ${{parent.jobs.a.outputs.b}}\n", "command", []string{"not supported"}},
		{"unclosed", "command: echo ${{inputs.x\ninputs: {x: 1}\n", "command", []string{"closing }}"}},
		// name, compute, tags
		{"name start", "name: -bad\n" + valid, "name", []string{"starting with a letter or digit"}},
		{"name chars", "name: a.b\n" + valid, "name", []string{"not a valid job name"}},
		{"name long", "name: " + strings.Repeat("a", 256) + "\n" + valid, "name", []string{"1 to 255"}},
		{"compute slash", valid + "compute: a/b\n", "compute", []string{"not a compute target"}},
		{"compute space", valid + "compute: my cluster\n", "compute", []string{"not a compute target"}},
		{"compute short", valid + "compute: azureml:x\n", "compute", []string{"2 to 32"}},
		{"compute arm id", valid + "compute: azureml:/subscriptions/x/computes/y\n", "compute", []string{"not a compute target"}},
		{"empty tag name", valid + "tags: {'': x}\n", "tags", []string{"needs a name"}},
		// inputs and outputs
		{"input name", valid + "inputs: {1x: 5}\n", "inputs.1x", []string{"not a valid input name"}},
		{"input type", valid + "inputs: {d: {type: blob, path: p}}\n", "inputs.d.type", []string{"uri_folder", `"blob"`}},
		{"input path", valid + "inputs: {d: {type: uri_file}}\n", "inputs.d.path", []string{"needs a path"}},
		{"input mode", valid + "inputs: {d: {type: uri_file, path: p, mode: upload}}\n", "inputs.d.mode", []string{"ro_mount, download, direct, rw_mount, eval_mount, eval_download or mount"}},
		{"input s3 path", valid + "inputs: {d: {type: uri_file, path: 's3://b/x'}}\n", "inputs.d.path", []string{"s3:// paths cannot be read here"}},
		{"input datastore path", valid + "inputs: {d: {type: uri_folder, path: 'azureml://datastores/st/paths/../x'}}\n", "inputs.d.path", []string{`".." step`}},
		{"null input", valid + "inputs: {d: }\n", "inputs.d", []string{"give a value"}},
		{"literal with type", valid + "inputs: {d: {value: 1, type: uri_file}}\n", "inputs.d", []string{"only a value"}},
		{"output name", valid + "outputs: {out-1: {}}\n", "outputs.out-1", []string{"not a valid output name"}},
		{"output type", valid + "outputs: {o: {type: mltable}}\n", "outputs.o.type", []string{`"mltable"`}},
		{"output mode", valid + "outputs: {o: {mode: ro_mount}}\n", "outputs.o.mode", []string{"rw_mount, upload, direct or mount"}},
		// environment variables
		{"reserved var", valid + "environment_variables: {FERRY_JOB_ID: x}\n", "environment_variables.FERRY_JOB_ID", []string{"reserved"}},
		{"bad var", valid + "environment_variables: {1X: x}\n", "environment_variables.1X", []string{"not a valid variable name"}},
		{"var with dash", valid + "environment_variables: {MY-VAR: x}\n", "environment_variables.MY-VAR", []string{"not a valid variable name"}},
		{"var with NUL", valid + "environment_variables: {X: \"a\\0b\"}\n", "environment_variables.X", []string{"NUL"}},
		// limits, resources
		{"negative timeout", valid + "limits: {timeout: -1}\n", "limits.timeout", []string{"from 0", "-1"}},
		{"timeout that overflows a duration", valid + "limits: {timeout: 9300000000}\n", "limits.timeout", []string{"to 31622400", "9300000000"}},
		{"instance count", valid + "resources: {instance_count: -2}\n", "resources.instance_count", []string{"from 1", "-2"}},
		{"instance count too big", valid + "resources: {instance_type: Standard_DS1_v2, instance_count: 2147483648}\n", "resources.instance_count", []string{"to 1024", "2147483648"}},
		{"shm word", valid + "resources: {shm_size: lots}\n", "resources.shm_size", []string{"2g"}},
		{"shm unit", valid + "resources: {shm_size: 2t}\n", "resources.shm_size", []string{`"2t"`}},
		// distribution
		{"distribution type", valid + "distribution: {type: horovod}\n", "distribution.type", []string{"pytorch, mpi or tensorflow"}},
		{"distribution no type", valid + "distribution: {process_count_per_instance: 2}\n", "distribution.type", []string{"required"}},
		{"negative processes", valid + "distribution: {type: pytorch, process_count_per_instance: -1}\n", "distribution.process_count_per_instance", []string{"from 0", "-1"}},
		{"processes without bound", valid + "distribution: {type: pytorch, process_count_per_instance: 100000000}\n", "distribution.process_count_per_instance", []string{"to 256", "100000000"}},
		{"workers without bound", valid + "distribution: {type: tensorflow, worker_count: 100000000}\n", "distribution.worker_count", []string{"to 262144", "100000000"}},
		{"tf with processes", valid + "distribution: {type: tensorflow, process_count_per_instance: 2}\n", "distribution.process_count_per_instance", []string{"pytorch and mpi"}},
		{"pytorch with workers", valid + "distribution: {type: pytorch, worker_count: 2}\n", "distribution.worker_count", []string{"tensorflow"}},
		{"mpi with parameter servers", valid + "distribution: {type: mpi, parameter_server_count: 1}\n", "distribution.parameter_server_count", []string{"tensorflow"}},
		// services, queue, identity
		{"service type", valid + "services: {s: {type: rdp}}\n", "services.s.type", []string{"jupyter_lab"}},
		{"service port", valid + "services: {s: {type: ssh, port: 70000}}\n", "services.s.port", []string{"65535"}},
		{"service nodes", valid + "services: {s: {type: ssh, nodes: some}}\n", "services.s.nodes", []string{"all"}},
		{"job tier", valid + "queue_settings: {job_tier: gold}\n", "queue_settings.job_tier", []string{"spot, basic, standard or premium"}},
		{"priority", valid + "queue_settings: {priority: urgent}\n", "queue_settings.priority", []string{"low, medium or high"}},
		{"identity type", valid + "identity: {type: root}\n", "identity.type", []string{"user_identity, managed or aml_token"}},
		{"identity client", valid + "identity: {type: aml_token, client_id: x}\n", "identity", []string{"managed"}},
		// environment
		{"env ref", valid + "environment: 'bad ref!'\n", "environment", []string{"not an environment reference"}},
		{"env ref without version", valid + "environment: myenv\n", "environment", []string{"azureml:NAME:VERSION"}},
		{"env other registry", valid + "environment: azureml://registries/contoso/environments/sklearn/labels/latest\n", "environment", []string{"registry \"contoso\" is not known", "ferry environment create"}},
		{"env registry label", valid + "environment: azureml://registries/azureml/environments/sklearn/labels/stable\n", "environment", []string{"labels/latest", ".../versions/VERSION"}},
		{"env workspace uri", valid + "environment: azureml://locations/westus/workspaces/ws/environments/sklearn/versions/1\n", "environment", []string{"not an environment reference Ferry knows"}},
		{"env empty file", valid + "environment: \"file:\"\n", "environment", []string{"file: needs the path"}},
		{"env ref with more", valid + "environment: {ref: 'env:1', image: x}\n", "environment", []string{"stands alone"}},
		{"env nothing", valid + "environment: {name: x}\n", "environment", []string{"say how to make"}},
		{"env two kinds", valid + "environment: {image: a, python: {requirements: r.txt}}\n", "environment", []string{"only one", "image and python"}},
		{"env conda with build", valid + "environment: {build: {path: d}, conda_file: c.yml}\n", "environment.conda_file", []string{"not with build"}},
		{"env interpreter", valid + "environment: {image: a, interpreter_path: /usr/bin/python3}\n", "environment.interpreter_path", []string{"user_managed"}},
		{"env build path", valid + "environment: {build: {dockerfile_path: D}}\n", "environment.build.path", []string{"needs path"}},
		{"env requirements", valid + "environment: {python: {version: '3.11'}}\n", "environment.python.requirements", []string{"requirements"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseJob([]byte(c.yaml))
			wantProblem(t, err, c.field, c.want...)
		})
	}
}

func TestFileErrors(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"empty", "", "the job file is empty; a command job needs at least `command:`"},
		{"only comments", "# nothing\n", "empty"},
		{"null document", "---\n...\n", "empty"},
		{"not yaml", "command: [x\n", "not valid YAML"},
		{"bad indentation", "command: x\n  limits: 1\n", "line 2: not valid YAML"},
		{"tab indentation", "limits:\n\ttimeout: 1\n", "line 2: not valid YAML"},
		{"list", "- a\n- b\n", "line 1: the job file must be a YAML mapping of fields (field: value), got a list"},
		{"scalar", "python train.py\n", "got \"python train.py\""},
		{"two documents", valid + "---\n" + valid, "line 2: the job file holds more than one YAML document"},
		{"unknown alias", "command: *x\n", "not valid YAML"},
		{"bad merge", valid + "tags:\n  <<: 5\n", "<< must be followed by a mapping"},
		{"two merges", "a: &a {x: 1}\ntags:\n  <<: *a\n  <<: *a\n", "only one << merge key"},
		{"alias bomb", aliasBomb(), "too large once its aliases are expanded"},
		{"deep nesting", "tags: " + strings.Repeat("[", 300) + strings.Repeat("]", 300) + "\n", "nests deeper"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseJob([]byte(c.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			fieldErrors(t, err)
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

// aliasBomb is the "billion laughs" document: a few lines that expand into
// 10^9 values.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for k := 0; k < 10; k++ {
			if k > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	return "command: x\nresources:\n  properties:\n" + indent(b.String(), "    ")
}

func indent(s, by string) string {
	return by + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n"+by) + "\n"
}

func TestEveryProblemIsReported(t *testing.T) {
	_, err := ParseJob([]byte("name: -x\nlimits: {timeout: -1}\nenvironment_variables: {FERRY_X: a, 2: b}\n"))
	es := fieldErrors(t, err)
	var got []string
	for _, e := range es {
		got = append(got, e.Field)
	}
	want := []string{"name", "command", "environment_variables.2", "environment_variables.FERRY_X", "limits.timeout"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fields with problems (-want +got):\n%s\n%v", diff, err)
	}
	// Problems found after decoding have the line of their field too.
	for _, e := range es {
		if e.Field != "command" && e.Line == 0 {
			t.Errorf("%s has no line", e.Field)
		}
	}
	if !strings.HasPrefix(err.Error(), "5 problems:\n  name (line 1): ") {
		t.Errorf("Error() = %q", err)
	}
	// Structural problems are all reported too, before any validation.
	_, err = ParseJob([]byte("comand: x\nlimits: {timout: 1}\nresources: {instance_count: x}\n"))
	if es := fieldErrors(t, err); len(es) != 3 {
		t.Errorf("want 3 problems, got %v", err)
	}
}

func TestFieldErrorFormat(t *testing.T) {
	for _, c := range []struct {
		e    FieldError
		want string
	}{
		{FieldError{Field: "limits.timeout", Line: 7, Message: `must be a whole number of seconds ≥ 0, got "abc"`}, `limits.timeout (line 7): must be a whole number of seconds ≥ 0, got "abc"`},
		{FieldError{Field: "command", Message: "is required"}, "command: is required"},
		{FieldError{Line: 3, Message: "not valid YAML"}, "line 3: not valid YAML"},
		{FieldError{Message: "empty"}, "empty"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
	_, err := ParseJob([]byte("command: x\nlimits:\n  timeout: abc\n"))
	if want := `limits.timeout (line 3): must be a whole number of seconds ≥ 0, got "abc"`; err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
	_, err = ParseJob([]byte("name: a\ncomand: x\n"))
	if want := `comand (line 2): unknown field "comand"; did you mean "command"?`; err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
	// The API returns the problems as JSON.
	raw, err := json.Marshal(Errors{{Field: "a", Line: 2, Message: "m"}, {Message: "n"}})
	if err != nil || string(raw) != `[{"field":"a","line":2,"message":"m"},{"message":"n"}]` {
		t.Errorf("JSON = %s, %v", raw, err)
	}
}

func TestSet(t *testing.T) {
	base := "command: echo ${{inputs.n}}\ninputs:\n  n: 1\n  d: {type: uri_folder, path: ./d}\nlimits:\n  timeout: 10\n"
	j, err := ParseJobWithSet([]byte(base), []string{
		"limits.timeout=60", "inputs.n=5", "environment_variables.FOO=bar baz", "compute=local",
		"tags.team=ml", "name=run-2", "resources.instance_count=2", "inputs.d.mode=download",
		"environment=azureml:env:1", "distribution.type=pytorch", "tags.team=vision",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &Job{
		Type:    "command",
		Name:    "run-2",
		Command: "echo ${{inputs.n}}",
		Inputs: map[string]Input{
			"n": {Value: ptr("5")},
			"d": {Type: "uri_folder", Path: "./d", Mode: "download"},
		},
		Limits:               &Limits{Timeout: 60},
		EnvironmentVariables: map[string]string{"FOO": "bar baz"},
		Compute:              "local",
		Tags:                 map[string]string{"team": "vision"},
		Resources:            &Resources{InstanceCount: 2},
		Environment:          &Environment{Ref: "azureml:env:1"},
		Distribution:         &Distribution{Type: "pytorch"},
	}
	if diff := cmp.Diff(want, j); diff != "" {
		t.Errorf("job after --set (-want +got):\n%s", diff)
	}

	// A set replaces a whole value, and an empty value is null.
	j, err = ParseJobWithSet([]byte(base), []string{"inputs.d=./other", "limits="})
	if err != nil {
		t.Fatal(err)
	}
	if *j.Inputs["d"].Value != "./other" || j.Limits != nil {
		t.Errorf("inputs.d = %+v, limits = %+v", j.Inputs["d"], j.Limits)
	}

	// Sets alone make a job.
	j, err = ParseJobWithSet(nil, []string{"command=python train.py", "compute=local"})
	if err != nil || j.Command != "python train.py" || j.Compute != "local" {
		t.Errorf("job from sets = %+v, %v", j, err)
	}

	for _, c := range []struct{ set, field string }{
		{"novalue", "--set novalue"},
		{"=x", "--set =x"},
		{"limits..timeout=1", "--set limits..timeout=1"},
		{"command.x=1", "--set command.x=1"},
		{"limits.timeout=soon", "limits.timeout"},
		{"limts.timeout=5", "limts"},
	} {
		_, err := ParseJobWithSet([]byte(base), []string{c.set})
		wantProblem(t, err, c.field)
	}
	_, err = ParseJobWithSet([]byte(base), []string{"command.x=1"})
	wantProblem(t, err, "--set command.x=1", `command is "echo ${{inputs.n}}", not a mapping, so it has no field "x"`)
	_, err = ParseJobWithSet([]byte(base), []string{"limits.timeout=-5"})
	wantProblem(t, err, "limits.timeout", "line 6", "got -5 (from --set limits.timeout=-5)")
	_, err = ParseJobWithSet([]byte(base), []string{"bad", "=y"})
	if es := fieldErrors(t, err); len(es) != 2 {
		t.Errorf("want both bad sets reported, got %v", err)
	}
}

func TestDecodeJobJSON(t *testing.T) {
	j, err := DecodeJobJSON([]byte(`{
		"command": "echo ${{inputs.n}}",
		"inputs": {"n": 3, "f": 0.5, "s": "x", "b": false, "v": {"value": 2}, "d": {"type": "uri_file", "path": "p"}},
		"environment": "env@latest"
	}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Job{
		Type:    "command",
		Command: "echo ${{inputs.n}}",
		Inputs: map[string]Input{
			"n": {Value: ptr("3")}, "f": {Value: ptr("0.5")}, "s": {Value: ptr("x")}, "b": {Value: ptr("false")},
			"v": {Value: ptr("2")}, "d": {Type: "uri_file", Path: "p"},
		},
		Environment: &Environment{Ref: "env@latest"},
	}
	if diff := cmp.Diff(want, j); diff != "" {
		t.Errorf("decoded job (-want +got):\n%s", diff)
	}
	// json.Marshal writes the long forms.
	raw, err := json.Marshal(&Job{Command: "x", Inputs: map[string]Input{"n": {Value: ptr("5")}}, Environment: &Environment{Ref: "e:1"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"command":"x","environment":{"ref":"e:1"},"inputs":{"n":{"value":"5"}}}`; string(raw) != want {
		t.Errorf("JSON = %s, want %s", raw, want)
	}

	for _, c := range []struct{ body, field, want string }{
		{`{"command": "x", "bogus": 1}`, "bogus", "unknown field"},
		{`{"command": "x", "limits": {"timout": 1}}`, "limits.timout", `did you mean "timeout"?`},
		{"{\"command\": \"x\",\n \"inputs\": {\"d\": {\"type\": \"uri_file\", \"pth\": \"p\"}}}", "inputs.d.pth", "line 2"},
		{`{"command": "x", "limits": {"timeout": "soon"}}`, "limits.timeout", "whole number"},
		{`{"command": 5}`, "command", "must be a string"},
		{`{"command": "x", "inputs": {"n": [1]}}`, "inputs.n", "a value"},
		{`{"command": "x", "environment": 5}`, "environment", "reference"},
		{`{"command": "x", "name": "-bad"}`, "name", "not a valid job name"},
		{"{\n\"command\": \"x\",\n\"limits\": {\"timeout\": -1}}", "limits.timeout", "line 3"},
		{`{"Command": "x"}`, "Command", `did you mean "command"?`},
		{`{"command": "x", "command": "y"}`, "command", "twice"},
		{`{"command": "x"} {}`, "", "more than one JSON value"},
		{`{"command": "x",}`, "", "not valid JSON"},
		{`[1]`, "", "must be a JSON object"},
		{``, "", "the job spec is empty"},
		{`null`, "", "the job spec is empty"},
	} {
		_, err := DecodeJobJSON([]byte(c.body))
		wantProblem(t, err, c.field, c.want)
	}
}

func TestStoredSpecsDecodeWithoutValidation(t *testing.T) {
	// The workspace reads stored specs back with plain json.Unmarshal.
	var j Job
	if err := json.Unmarshal([]byte(`{"command": "x", "inputs": {"n": 5, "d": {"path": "p"}}, "environment": {"image": "i"}}`), &j); err != nil {
		t.Fatal(err)
	}
	if *j.Inputs["n"].Value != "5" || j.Inputs["d"].Path != "p" || j.Environment.Image != "i" {
		t.Errorf("job = %+v", j)
	}
}

func TestHelpers(t *testing.T) {
	for compute, want := range map[string]string{"": "", "local": "local", "azureml:gpu": "gpu", "gpu": "gpu"} {
		if got := (&Job{Compute: compute}).ComputeName(); got != want {
			t.Errorf("ComputeName(%q) = %q, want %q", compute, got, want)
		}
	}
	type parts struct {
		Name, Version string
		Latest, OK    bool
	}
	for ref, want := range map[string]parts{
		"azureml:env:1":         {"env", "1", false, true},
		"env:2.0":               {"env", "2.0", false, true},
		"env@latest":            {"env", "", true, true},
		"azureml:my.env@latest": {"my.env", "", true, true},
		"env":                   {},
		"azureml:env":           {},
		"env:1:2":               {},
		"env@v1":                {},
		"":                      {},
		"azureml://registries/azureml/environments/sklearn-1.5/labels/latest": {"sklearn-1.5", "", true, true},
		"azureml://registries/azureml/environments/sklearn-1.5/versions/12":   {"sklearn-1.5", "12", false, true},
		"azureml://registries/azureml/environments/sklearn-1.5":               {},
		"azureml://registries/other/environments/sklearn-1.5/versions/12":     {},
		"file:./env.yml": {},
	} {
		var got parts
		got.Name, got.Version, got.Latest, got.OK = (&Environment{Ref: ref}).RefParts()
		if got != want {
			t.Errorf("RefParts(%q) = %+v, want %+v", ref, got, want)
		}
	}
	if (Input{Value: ptr("")}).IsLiteral() != true || (Input{Path: "p"}).IsLiteral() != false {
		t.Error("IsLiteral")
	}

	j, err := ParseJob(readFile(t, "testdata/job-full.yml"))
	if err != nil {
		t.Fatal(err)
	}
	c := j.Clone()
	if diff := cmp.Diff(j, c); diff != "" {
		t.Fatalf("clone differs:\n%s", diff)
	}
	*c.Inputs["lr"].Value = "9"
	c.Tags["team"] = "other"
	c.Resources.Properties["zones"].([]any)[0] = 7.0
	c.Limits.Timeout = 1
	if *j.Inputs["lr"].Value != "0.01" || j.Tags["team"] != "ml" || j.Resources.Properties["zones"].([]any)[0] != 1.0 || j.Limits.Timeout != 3600 {
		t.Error("changing the clone changed the original")
	}
	if (*Job)(nil).Clone() != nil {
		t.Error("Clone of nil")
	}
	if err := (*Job)(nil).Validate(); err == nil {
		t.Error("Validate of nil passed")
	}
}

func TestValidateSetsType(t *testing.T) {
	j := &Job{Command: "x"}
	if err := j.Validate(); err != nil || j.Type != "command" {
		t.Errorf("Validate = %v, type %q", err, j.Type)
	}
	if err := (&Job{}).Validate(); err == nil {
		t.Error("empty job passed")
	} else if _, ok := err.(Errors); !ok {
		t.Errorf("Validate returned %T, want Errors", err)
	}
}

func TestTestdataComputes(t *testing.T) {
	for _, p := range glob(t, "testdata/compute-*.yml") {
		t.Run(filepath.Base(p), func(t *testing.T) {
			c, err := ParseCompute(readFile(t, p))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Errorf("Validate after defaults: %v", err)
			}
			raw, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			back, err := DecodeComputeJSON(raw)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c, back); diff != "" {
				t.Errorf("JSON round trip (-yaml +json):\n%s", diff)
			}
		})
	}
}

func TestComputeDefaults(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want *Compute
	}{
		{"name: small\ntype: amlcompute\n", &Compute{
			Name: "small", Type: "amlcompute", Size: "Standard_DS3_v2", Tier: "dedicated",
			MinInstances: ptr(0), MaxInstances: ptr(1), IdleTimeBeforeScaleDown: ptr(120),
		}},
		{"name: big\ntype: amlcompute\nsize: Standard_NC24\nmin_instances: 2\nmax_instances: 8\nidle_time_before_scale_down: 0\ntier: low_priority\n", &Compute{
			Name: "big", Type: "amlcompute", Size: "Standard_NC24", Tier: "low_priority",
			MinInstances: ptr(2), MaxInstances: ptr(8), IdleTimeBeforeScaleDown: ptr(0),
		}},
		{"name: dev\ntype: computeinstance\n", &Compute{Name: "dev", Type: "computeinstance", Size: "Standard_DS3_v2", EnableRootAccess: ptr(true)}},
		{"name: box\ntype: virtualmachine\naddress: h\nssh_settings: {admin_username: u, admin_password: p}\n", &Compute{
			Name: "box", Type: "virtualmachine", Address: "h", SSHSettings: &SSHSettings{AdminUsername: "u", AdminPassword: "p", SSHPort: 22},
		}},
		{"name: k8\ntype: kubernetes\n", &Compute{Name: "k8", Type: "kubernetes", Namespace: "default"}},
		{"name: k8\ntype: kubernetes\nregistry: 127.0.0.1:5000/ferry/ci\nregistry_credentials: {username: u, password: p}\n", &Compute{Name: "k8", Type: "kubernetes", Namespace: "default",
			Registry: "127.0.0.1:5000/ferry/ci", RegistryCredentials: &RegistryCredentials{Username: "u", Password: "p"}}},
		{"name: local\ntype: local\n", &Compute{Name: "local", Type: "local"}},
		{"name: hpc\ntype: slurm\npartition: debug\nwork_dir: /shared/ferry\n", &Compute{Name: "hpc", Type: "slurm", Partition: "debug", WorkDir: "/shared/ferry"}},
		{"name: hpc\ntype: slurm\npartition: debug\nwork_dir: /w\naddress: login\nhost_key: trust-on-first-use\nssh_settings: {admin_username: u, ssh_private_key: k}\n", &Compute{
			Name: "hpc", Type: "slurm", Partition: "debug", WorkDir: "/w", Address: "login", HostKey: "trust-on-first-use",
			SSHSettings: &SSHSettings{AdminUsername: "u", SSHPrivateKey: "k", SSHPort: 22},
		}},
	} {
		got, err := ParseCompute([]byte(c.yaml))
		if err != nil {
			t.Errorf("%q: %v", c.yaml, err)
			continue
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", c.yaml, diff)
		}
		again := got
		again.ApplyDefaults()
		if diff := cmp.Diff(c.want, again); diff != "" {
			t.Errorf("ApplyDefaults is not idempotent:\n%s", diff)
		}
	}
}

func TestComputeRulesReject(t *testing.T) {
	for _, c := range []struct{ name, yaml, field, want string }{
		{"no name", "type: local\n", "name", "required"},
		{"name with space", "name: x y\ntype: local\n", "name", "not a valid name"},
		{"name starts with digit", "name: 1box\ntype: local\n", "name", "starting with a letter"},
		{"name underscore", "name: my_box\ntype: local\n", "name", "letters, digits or '-'"},
		{"name too long", "name: " + strings.Repeat("a", 33) + "\ntype: local\n", "name", "2 to 32"},
		{"cluster name too short", "name: ab\ntype: amlcompute\n", "name", "3 to 24"},
		{"cluster name too long", "name: " + strings.Repeat("a", 25) + "\ntype: amlcompute\n", "name", "3 to 24"},
		{"no type", "name: box\n", "type", "required"},
		{"bad type", "name: box\ntype: cloud\n", "type", "local, amlcompute, computeinstance, virtualmachine, kubernetes or slurm"},
		{"unknown field", "name: box\ntype: local\nsizee: x\n", "sizee", `did you mean "size"?`},
		{"v1 name", "name: box\ntype: amlcompute\nvm_size: x\n", "vm_size", `did you mean "size"?`},
		{"capacity on a cluster", "name: gpu-cluster\ntype: amlcompute\ncapacity: 2\n", "capacity", "applies only to types local and kubernetes, not amlcompute"},
		{"kubeconfig on slurm", "name: hpc\ntype: slurm\npartition: p\nwork_dir: /w\nkubeconfig: k\n", "kubeconfig", "applies only to type kubernetes"},
		{"k8s bad quantity", "name: k8s\ntype: kubernetes\ninstance_types:\n  small:\n    resources:\n      limits: {memory: lots}\n", "instance_types.small.resources.limits.memory", "not a quantity"},
		{"k8s unknown default instance type", "name: k8s\ntype: kubernetes\ndefault_instance_type: big\ninstance_types:\n  small: {}\n", "default_instance_type", "none of instance_types"},
		{"k8s bad api_url", "name: k8s\ntype: kubernetes\napi_url: 10.0.0.1:6443\n", "api_url", "not the URL"},
		{"k8s bad toleration", "name: k8s\ntype: kubernetes\ninstance_types:\n  small:\n    tolerations: [{key: a, operator: Maybe}]\n", "instance_types.small.tolerations[0].operator", "must be one of"},
		{"k8s pod_template field", "name: k8s\ntype: kubernetes\npod_template: {kind: Pod}\n", "pod_template.kind", "unknown field"},
		{"k8s registry with a scheme", "name: k8s\ntype: kubernetes\nregistry: http://127.0.0.1:5000\n", "registry", "HOST[:PORT][/PREFIX]"},
		{"k8s registry bad host", "name: k8s\ntype: kubernetes\nregistry: 'reg istry'\n", "registry", "not a registry host"},
		{"k8s registry bad prefix", "name: k8s\ntype: kubernetes\nregistry: reg.example/ML\n", "registry", "repository prefix"},
		{"k8s registry credentials alone", "name: k8s\ntype: kubernetes\nregistry_credentials: {username: u, password: p}\n", "registry_credentials", "without a registry"},
		{"k8s registry credentials half", "name: k8s\ntype: kubernetes\nregistry: 127.0.0.1:5000\nregistry_credentials: {username: u}\n", "registry_credentials", "both username and password"},
		{"registry on slurm", "name: hpc\ntype: slurm\npartition: p\nwork_dir: /w\nregistry: r.example\n", "registry", "applies only to type kubernetes"},
		{"instances on local", "name: box\ntype: local\nmax_instances: 3\n", "max_instances", "applies only to type amlcompute"},
		{"zero min on local", "name: box\ntype: local\nmin_instances: 0\n", "min_instances", "applies only to type amlcompute"},
		{"tier on an instance", "name: dev\ntype: computeinstance\ntier: dedicated\n", "tier", "applies only to type amlcompute"},
		{"schedules on a cluster", "name: gpu\ntype: amlcompute\nschedules: {compute_start_stop: []}\n", "schedules", "applies only to type computeinstance"},
		{"shutdown on a cluster", "name: gpu\ntype: amlcompute\nidle_time_before_shutdown_minutes: 30\n", "idle_time_before_shutdown_minutes", "computeinstance"},
		{"address on a cluster", "name: gpu\ntype: amlcompute\naddress: h\n", "address", "applies only to types virtualmachine and slurm"},
		{"host key on k8s", "name: k8\ntype: kubernetes\nhost_key: x\n", "host_key", "virtualmachine"},
		{"namespace on a vm", "name: box\ntype: virtualmachine\naddress: h\nnamespace: x\nssh_settings: {admin_username: u, admin_password: p}\n", "namespace", "applies only to type kubernetes"},
		{"resource id on local", "name: box\ntype: local\nresource_id: x\n", "resource_id", "types virtualmachine and kubernetes"},
		{"key file on a cluster", "name: gpu\ntype: amlcompute\nssh_settings: {admin_username: u, ssh_private_key_file: k}\n", "ssh_settings.ssh_private_key_file", "virtualmachine"},
		{"password on an instance", "name: dev\ntype: computeinstance\nssh_settings: {admin_password: p}\n", "ssh_settings.admin_password", "types amlcompute, virtualmachine and slurm"},
		{"negative capacity", "name: box\ntype: local\ncapacity: -1\n", "capacity", "from 0"},
		{"capacity too big", "name: box\ntype: local\ncapacity: 100000\n", "capacity", "to 4096"},
		{"max too big", "name: gpu-cluster\ntype: amlcompute\nmax_instances: 2147483648\n", "max_instances", "at most 1024"},
		{"idle too long", "name: gpu-cluster\ntype: amlcompute\nidle_time_before_scale_down: 9300000000\n", "idle_time_before_scale_down", "to 31622400"},
		{"capacity text", "name: box\ntype: local\ncapacity: many\n", "capacity", "whole number of jobs"},
		{"max below min", "name: gpu-cluster\ntype: amlcompute\nmin_instances: 2\nmax_instances: 0\n", "max_instances", "max_instances (line 4): must be ≥ min_instances (got 0 < 2)"},
		{"max zero", "name: gpu-cluster\ntype: amlcompute\nmax_instances: 0\n", "max_instances", "≥ 1"},
		{"min negative", "name: gpu-cluster\ntype: amlcompute\nmin_instances: -1\n", "min_instances", "from 0"},
		{"idle negative", "name: gpu-cluster\ntype: amlcompute\nidle_time_before_scale_down: -5\n", "idle_time_before_scale_down", "seconds from 0"},
		{"tier", "name: gpu-cluster\ntype: amlcompute\ntier: gold\n", "tier", "dedicated or low_priority"},
		{"size with space", "name: gpu-cluster\ntype: amlcompute\nsize: big one\n", "size", "size name"},
		{"shutdown too soon", "name: dev1\ntype: computeinstance\nidle_time_before_shutdown_minutes: 5\n", "idle_time_before_shutdown_minutes", "15 to 4320"},
		{"shutdown too late", "name: dev1\ntype: computeinstance\nidle_time_before_shutdown_minutes: 5000\n", "idle_time_before_shutdown_minutes", "15 to 4320"},
		{"schedule field", "name: dev1\ntype: computeinstance\nschedules: {start: x}\n", "schedules.start", "compute_start_stop"},
		{"schedule list", "name: dev1\ntype: computeinstance\nschedules: {compute_start_stop: x}\n", "schedules.compute_start_stop", "list"},
		{"too many schedules", "name: dev1\ntype: computeinstance\nschedules:\n  compute_start_stop: [" + strings.Repeat("{action: stop, trigger: {type: cron, expression: '0 18 * * *'}}, ", 5) + "]\n", "schedules.compute_start_stop", "at most 4"},
		{"schedule action", "name: dev1\ntype: computeinstance\nschedules:\n  compute_start_stop:\n    - action: pause\n      trigger: {type: cron, expression: 0 18 * * *}\n", "schedules.compute_start_stop[0].action", "line 5"},
		{"schedule trigger", "name: dev1\ntype: computeinstance\nschedules: {compute_start_stop: [{action: stop}]}\n", "schedules.compute_start_stop[0].trigger", "required"},
		{"schedule cron", "name: dev1\ntype: computeinstance\nschedules: {compute_start_stop: [{action: stop, trigger: {type: cron, expression: daily}}]}\n", "schedules.compute_start_stop[0].trigger.expression", "five-field"},
		{"schedule recurrence", "name: dev1\ntype: computeinstance\nschedules: {compute_start_stop: [{action: stop, trigger: {type: recurrence, frequency: fortnight, interval: 1}}]}\n", "schedules.compute_start_stop[0].trigger.frequency", "minute, hour, day, week or month"},
		{"schedule interval", "name: dev1\ntype: computeinstance\nschedules: {compute_start_stop: [{action: stop, trigger: {type: recurrence, frequency: day, interval: 0}}]}\n", "schedules.compute_start_stop[0].trigger.interval", "≥ 1"},
		{"schedule trigger type", "name: dev1\ntype: computeinstance\nschedules: {compute_start_stop: [{action: stop, trigger: {type: once}}]}\n", "schedules.compute_start_stop[0].trigger.type", "cron or recurrence"},
		{"setup script field", "name: dev1\ntype: computeinstance\nsetup_scripts: {boot: {path: a.sh}}\n", "setup_scripts.boot", "creation_script and startup_script"},
		{"setup script path", "name: dev1\ntype: computeinstance\nsetup_scripts: {startup_script: {timeout_minutes: 5}}\n", "setup_scripts.startup_script", "path"},
		{"vm address", "name: box\ntype: virtualmachine\nssh_settings: {admin_username: u, admin_password: p}\n", "address", "required"},
		{"vm address with space", "name: box\ntype: virtualmachine\naddress: a b\nssh_settings: {admin_username: u, admin_password: p}\n", "address", "host name"},
		{"vm user", "name: box\ntype: virtualmachine\naddress: h\nssh_settings: {admin_password: p}\n", "ssh_settings.admin_username", "required"},
		{"vm no ssh", "name: box\ntype: virtualmachine\naddress: h\n", "ssh_settings.admin_username", "required"},
		{"vm credential", "name: box\ntype: virtualmachine\naddress: h\nssh_settings: {admin_username: u}\n", "ssh_settings", "ssh_private_key_file (recommended) or admin_password"},
		{"vm two credentials", "name: box\ntype: virtualmachine\naddress: h\nssh_settings: {admin_username: u, admin_password: p, ssh_private_key_file: k}\n", "ssh_settings", "not both"},
		{"vm port", "name: box\ntype: virtualmachine\naddress: h\nssh_settings: {admin_username: u, admin_password: p, ssh_port: 70000}\n", "ssh_settings.ssh_port", "65535"},
		{"vm host key", "name: box\ntype: virtualmachine\naddress: h\nhost_key: yes\nssh_settings: {admin_username: u, admin_password: p}\n", "host_key", "trust-on-first-use"},
		{"vm passphrase without key", "name: box\ntype: virtualmachine\naddress: h\nssh_settings: {admin_username: u, admin_password: p, ssh_private_key_passphrase: x}\n", "ssh_settings.ssh_private_key_passphrase", "only with ssh_private_key_file"},
		{"on behalf of no user", "name: dev1\ntype: computeinstance\ncreate_on_behalf_of: {user_tenant_id: t}\n", "create_on_behalf_of.user_object_id", "required"},
		{"on behalf of field", "name: dev1\ntype: computeinstance\ncreate_on_behalf_of: {user_object_id: u, email: x}\n", "create_on_behalf_of.email", "user_object_id and user_tenant_id"},
		{"k8s namespace", "name: k8\ntype: kubernetes\nnamespace: My_NS\n", "namespace", "Kubernetes namespace"},
		{"slurm partition", "name: hpc\ntype: slurm\nwork_dir: /w\n", "partition", "required"},
		{"slurm two partitions", "name: hpc\ntype: slurm\npartition: a,b\nwork_dir: /w\n", "partition", "one partition"},
		{"slurm partition quote", "name: hpc\ntype: slurm\npartition: \"a'b\"\nwork_dir: /w\n", "partition", "not a partition name"},
		{"slurm account", "name: hpc\ntype: slurm\npartition: p\naccount: a b\nwork_dir: /w\n", "account", "not a Slurm account name"},
		{"slurm qos", "name: hpc\ntype: slurm\npartition: p\nqos: $(x)\nwork_dir: /w\n", "qos", "not a Slurm qos name"},
		{"slurm reservation", "name: hpc\ntype: slurm\npartition: p\nreservation: \"r\\n\"\nwork_dir: /w\n", "reservation", "not a Slurm reservation name"},
		{"slurm constraint", "name: hpc\ntype: slurm\npartition: p\nconstraint: a b\nwork_dir: /w\n", "constraint", "feature expression"},
		{"slurm time limit", "name: hpc\ntype: slurm\npartition: p\ndefault_time_limit: -1\nwork_dir: /w\n", "default_time_limit", "from 0"},
		{"slurm time limit text", "name: hpc\ntype: slurm\npartition: p\ndefault_time_limit: 1h\nwork_dir: /w\n", "default_time_limit", "whole number of seconds"},
		{"slurm tier", "name: hpc\ntype: slurm\npartition: p\njob_tier_qos: {gold: high}\nwork_dir: /w\n", "job_tier_qos.gold", "spot, basic, standard or premium"},
		{"slurm tier qos", "name: hpc\ntype: slurm\npartition: p\njob_tier_qos: {spot: \"\"}\nwork_dir: /w\n", "job_tier_qos.spot", "not a QOS name"},
		{"slurm priority", "name: hpc\ntype: slurm\npartition: p\npriority_nice: {urgent: 1}\nwork_dir: /w\n", "priority_nice.urgent", "low, medium or high"},
		{"slurm nice", "name: hpc\ntype: slurm\npartition: p\npriority_nice: {low: 2147483646}\nwork_dir: /w\n", "priority_nice.low", "nice value"},
		{"slurm work dir", "name: hpc\ntype: slurm\npartition: p\n", "work_dir", "required"},
		{"slurm work dir relative", "name: hpc\ntype: slurm\npartition: p\nwork_dir: ferry\n", "work_dir", "absolute"},
		{"slurm work dir root", "name: hpc\ntype: slurm\npartition: p\nwork_dir: /\n", "work_dir", "below /"},
		{"slurm work dir dots", "name: hpc\ntype: slurm\npartition: p\nwork_dir: /a/../b\n", "work_dir", "clean"},
		{"slurm work dir shell", "name: hpc\ntype: slurm\npartition: p\nwork_dir: /a/$HOME\n", "work_dir", "'$'"},
		{"slurm work dir space", "name: hpc\ntype: slurm\npartition: p\nwork_dir: /a b\n", "work_dir", "spaces"},
		{"slurm ssh without address", "name: hpc\ntype: slurm\npartition: p\nwork_dir: /w\nssh_settings: {admin_username: u, ssh_private_key_file: k}\n", "address", "required with ssh_settings"},
		{"slurm host key without address", "name: hpc\ntype: slurm\npartition: p\nwork_dir: /w\nhost_key: trust-on-first-use\n", "host_key", "only with address"},
		{"slurm login user", "name: hpc\ntype: slurm\npartition: p\nwork_dir: /w\naddress: login\nssh_settings: {ssh_private_key_file: k}\n", "ssh_settings.admin_username", "required"},
		{"slurm login credential", "name: hpc\ntype: slurm\npartition: p\nwork_dir: /w\naddress: login\nssh_settings: {admin_username: u}\n", "ssh_settings", "ssh_private_key_file (recommended)"},
		{"slurm login host key", "name: hpc\ntype: slurm\npartition: p\nwork_dir: /w\naddress: login\nhost_key: yes\nssh_settings: {admin_username: u, ssh_private_key_file: k}\n", "host_key", "trust-on-first-use"},
		{"slurm ssh key value", "name: hpc\ntype: slurm\npartition: p\nwork_dir: /w\naddress: login\nssh_settings: {admin_username: u, ssh_key_value: k}\n", "ssh_settings.ssh_key_value", "applies only to types amlcompute and computeinstance"},
		{"partition on a cluster", "name: gpu\ntype: amlcompute\npartition: p\n", "partition", "applies only to type slurm"},
		{"work dir on local", "name: box\ntype: local\nwork_dir: /w\n", "work_dir", "applies only to type slurm"},
		{"slurm unknown field", "name: hpc\ntype: slurm\npartition: p\nwork_dir: /w\npartiton: q\n", "partiton", `did you mean "partition"?`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseCompute([]byte(c.yaml))
			wantProblem(t, err, c.field, c.want)
		})
	}
}

func TestComputeErrors(t *testing.T) {
	_, err := ParseCompute([]byte("name: gpu-cluster\ntype: amlcompute\nmin_instances: 2\nmax_instances: 0\n"))
	if want := "compute gpu-cluster: max_instances (line 4): must be ≥ min_instances (got 0 < 2)"; err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
	if _, err := ParseCompute(nil); err == nil || !strings.Contains(err.Error(), "the compute file is empty") {
		t.Errorf("empty file: %v", err)
	}
	if err := (&Compute{Name: "x y", Type: "local"}).Validate(); err == nil || strings.HasPrefix(err.Error(), "compute") {
		t.Errorf("an invalid name is not repeated in front: %v", err)
	}
	if err := (*Compute)(nil).Validate(); err == nil {
		t.Error("Validate of nil passed")
	}
	for _, c := range []struct{ body, field, want string }{
		{`{"name": "one", "type": "local", "capacity": 2, "size": "x"}`, "size", "applies only to"},
		{`{"name": "one", "type": "local", "capacty": 2}`, "capacty", `did you mean "capacity"?`},
		{`{"name": "one", "type": "local", "capacity": "2"}`, "capacity", "whole number"},
		{`{"name": "one"}`, "type", "required"},
	} {
		_, err := DecodeComputeJSON([]byte(c.body))
		wantProblem(t, err, c.field, c.want)
	}
	c, err := DecodeComputeJSON([]byte(`{"name": "one", "type": "local", "capacity": 2}`))
	if err != nil || c.Capacity != 2 {
		t.Errorf("DecodeComputeJSON = %+v, %v", c, err)
	}
}

// FuzzParseJob checks that no input makes ParseJob panic, and that every
// job it accepts is valid and comes back unchanged through the API's JSON
// and through YAML.
func FuzzParseJob(f *testing.F) {
	for _, p := range glob(f, "testdata/job-*.yml") {
		f.Add(readFile(f, p))
	}
	f.Add([]byte("command: echo ${{inputs.a}}\ninputs: {a: 1}\n"))
	f.Add([]byte("command: x\nenvironment: {image: a, conda_file: c.yml}\n"))
	f.Add([]byte("command: x\nresources: {properties: {a: !!binary aGk=, b: .inf, 1: 2001-01-01}}\n"))
	f.Add([]byte("a: &x [1]\nb: *x\n"))
	f.Add([]byte("command: x\ncode: {local_path: s}\nenvironment: {build: {local_path: c}}\ninputs: {a: {folder: https://h/d/}, b: {file: https://h/f}, c: {dataset: {local_path: d}}}\nservices: {n: {job_service_type: ssh}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := ParseJob(data)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %v (%T) is not an Errors", err, err)
			}
			return
		}
		if err := j.Validate(); err != nil {
			t.Fatalf("parsed job does not validate: %v", err)
		}
		roundTrip(t, j)
	})
}

// FuzzParseCompute checks that no input makes ParseCompute panic, and that
// every compute it accepts comes back unchanged through the API's JSON.
func FuzzParseCompute(f *testing.F) {
	for _, p := range glob(f, "testdata/compute-*.yml") {
		f.Add(readFile(f, p))
	}
	f.Add([]byte("name: one\ntype: local\ncapacity: 3\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCompute(data)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %v (%T) is not an Errors", err, err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("parsed compute does not validate: %v", err)
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
			t.Fatalf("JSON round trip changed the compute:\n%s", diff)
		}
	})
}

// FuzzDecodeJobJSON checks that no body makes DecodeJobJSON panic, and that
// every job it accepts comes back unchanged from its own encoding.
func FuzzDecodeJobJSON(f *testing.F) {
	f.Add([]byte(`{"command": "echo ${{inputs.n}}", "inputs": {"n": 3, "d": {"type": "uri_file", "path": "p"}}, "environment": "env@latest"}`))
	f.Add([]byte(`{"command": "x", "resources": {"properties": {"a": [1, {"b": null}]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := DecodeJobJSON(data)
		if err != nil {
			return
		}
		raw, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeJobJSON(raw)
		if err != nil {
			t.Fatalf("refused its own encoding: %v\n%s", err, raw)
		}
		if diff := cmp.Diff(j, back); diff != "" {
			t.Fatalf("round trip changed the job:\n%s", diff)
		}
	})
}
