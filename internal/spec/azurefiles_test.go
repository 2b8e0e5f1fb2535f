package spec

import (
	"slices"
	"strings"
	"testing"
)

// Files written for Azure ML's early CLI v2 spell some fields the old way;
// they parse as their current spelling.
func TestLegacySpellingsInCommandJob(t *testing.T) {
	j, err := ParseJob([]byte(`
command: python fit.py --rows ${{inputs.rows}} --dir ${{inputs.shelf}}
code:
  local_path: ./trainer
environment:
  build:
    local_path: ./image-context
inputs:
  rows:
    file: https://data.example.org/rows.csv
  shelf:
    folder: https://data.example.org/shelf/
    mode: download
compute: local
`))
	if err != nil {
		t.Fatal(err)
	}
	if j.Code != "./trainer" {
		t.Errorf("code = %q, want ./trainer", j.Code)
	}
	if j.Environment == nil || j.Environment.Build == nil || j.Environment.Build.Path != "./image-context" {
		t.Errorf("environment.build = %+v, want path ./image-context", j.Environment)
	}
	if in := j.Inputs["rows"]; in.Type != "uri_file" || in.Path != "https://data.example.org/rows.csv" {
		t.Errorf("inputs.rows = %+v, want a uri_file at the URL", in)
	}
	if in := j.Inputs["shelf"]; in.Type != "uri_folder" || in.Path != "https://data.example.org/shelf/" || in.Mode != "download" {
		t.Errorf("inputs.shelf = %+v, want a uri_folder at the URL, mode download", in)
	}
}

// The old and the new spelling together is a mistake the user should see.
func TestLegacySpellingMixedWithCurrentIsRefused(t *testing.T) {
	_, err := ParseJob([]byte(`
command: echo hi
environment:
  build:
    path: ./a
    local_path: ./b
`))
	if err == nil || !strings.Contains(err.Error(), "local_path") {
		t.Fatalf("err = %v, want one naming local_path", err)
	}
}

func TestLegacySpellingInSweepTrial(t *testing.T) {
	j, err := ParseJob([]byte(`
type: sweep
trial:
  code:
    local_path: ./trainer
  command: python fit.py --lr ${{search_space.lr}}
  environment: azureml:AzureML-sklearn-1.0-ubuntu20.04-py38-cpu@latest
compute: local
sampling_algorithm: grid
search_space:
  lr: {type: choice, values: [0.1, 0.2]}
objective: {goal: maximize, primary_metric: acc}
limits: {max_total_trials: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	if j.Trial == nil || j.Trial.Code != "./trainer" {
		t.Fatalf("trial = %+v, want code ./trainer", j.Trial)
	}
}

// component: file:./x.yml names a local component file, as ./x.yml does.
func TestPipelineStepComponentFilePrefix(t *testing.T) {
	p, err := ParsePipelineJob([]byte(`
type: pipeline
jobs:
  fit:
    component: file:./parts/fit.yml
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	ref := p.Jobs["fit"].Component
	if ref == nil || ref.Ref != "./parts/fit.yml" || ref.IsRegistered() {
		t.Fatalf("component = %+v, want the local file ./parts/fit.yml", ref)
	}
}

// A component of a kind Ferry does not run is refused for its type alone,
// not also for the command it lacks.
func TestUnsupportedComponentTypeIsTheOnlyProblem(t *testing.T) {
	_, err := ParseComponent([]byte(`
name: nightly_scoring
type: pipeline
jobs:
  a: {type: command, component: ./a.yml}
`))
	if err == nil {
		t.Fatal("a pipeline component parsed")
	}
	es, ok := err.(Errors)
	if !ok || len(es) != 1 || es[0].Field != "type" || !strings.Contains(es[0].Message, "not supported") {
		t.Fatalf("err = %v, want exactly one problem on type saying it is not supported", err)
	}
}

// A data asset written as a path inside a named datastore is the same
// asset as one written with the datastore URI.
func TestDataAssetOnDatastoreOlderForm(t *testing.T) {
	f, err := ParseData([]byte(`
name: shelf-rows
version: 3
datastore: azureml:shared_nfs
path: ./tables/rows.csv
type: uri_file
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "azureml://datastores/shared_nfs/paths/tables/rows.csv"; f.Path != want {
		t.Fatalf("path = %q, want %q", f.Path, want)
	}
	for _, bad := range []struct{ file, field string }{
		{"name: a\ndatastore: azureml:shared_nfs\n", "path"},
		{"name: a\ndatastore: azureml:x/y\npath: t.csv\n", "datastore"},
		{"name: a\ndatastore: shared_nfs\npath: https://data.example.org/t.csv\n", "datastore"},
	} {
		_, err := ParseData([]byte(bad.file), nil)
		es, ok := err.(Errors)
		if !ok || len(es) == 0 || es[0].Field != bad.field {
			t.Errorf("%q: err = %v, want a problem on %s", bad.file, err, bad.field)
		}
	}
}

// An endpoint's identity is written as Azure writes it; a job refuses the
// endpoint-only fields by name.
func TestEndpointUserAssignedIdentity(t *testing.T) {
	e, err := ParseOnlineEndpoint([]byte(`
name: fare-scorer
auth_mode: key
identity:
  type: user_assigned
  user_assigned_identities:
    - resource_id: /ids/scorer
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.Identity == nil || len(e.Identity.UserAssignedIdentities) != 1 || e.Identity.UserAssignedIdentities[0].ResourceID != "/ids/scorer" {
		t.Fatalf("identity = %+v", e.Identity)
	}
	_, err = ParseJob([]byte(`
command: echo hi
identity:
  type: managed
  user_assigned_identities:
    - resource_id: /ids/scorer
`))
	if err == nil || !strings.Contains(err.Error(), "user_assigned_identities") {
		t.Fatalf("job err = %v, want one naming user_assigned_identities", err)
	}
}

// A step of a kind Ferry does not run is refused for its type alone.
func TestUnsupportedStepTypeIsTheOnlyProblem(t *testing.T) {
	for _, typ := range []string{"spark", "parallel", "automl"} {
		_, err := ParsePipelineJob([]byte(`
type: pipeline
jobs:
  odd:
    type: `+typ+`
    entry: {file: run.py}
`), nil)
		es, ok := err.(Errors)
		if !ok || len(es) != 1 || es[0].Field != "jobs.odd.type" || !strings.Contains(es[0].Message, typ+" steps are not supported") {
			t.Errorf("%s: err = %v, want exactly one problem on jobs.odd.type", typ, err)
		}
	}
}

// Azure's job files name a service's type job_service_type.
func TestServiceJobServiceType(t *testing.T) {
	j, err := ParseJob([]byte(`
command: python serve_notes.py
compute: local
services:
  notes:
    job_service_type: jupyter_lab
    nodes: all
  board:
    job_service_type: tensor_board
    properties:
      logDir: outputs/board
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := j.Services["notes"].Type; got != "jupyter_lab" {
		t.Errorf("services.notes.type = %q, want jupyter_lab", got)
	}
	if got := j.Services["board"].Type; got != "tensor_board" {
		t.Errorf("services.board.type = %q, want tensor_board", got)
	}
}

func TestModelOnDatastoreOlderForm(t *testing.T) {
	f, err := ParseModel([]byte(`
name: fare-model
version: 2
datastore: azureml:shared_nfs
path: models/fare
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "azureml://datastores/shared_nfs/paths/models/fare"; f.Path != want {
		t.Fatalf("path = %q, want %q", f.Path, want)
	}
}

// An inline environment's inference_config is kept, as a registered
// environment's is.
func TestInlineEnvironmentInferenceConfig(t *testing.T) {
	d, err := ParseOnlineDeployment([]byte(`
name: blue
endpoint_name: fares
model:
  local_path: ./model
code_configuration:
  code:
    local_path: ./scoring
  scoring_script: score.py
environment:
  image: registry.example.org/fare-server:2
  inference_config:
    scoring_route: {port: 8080, path: /score}
instance_type: Standard_DS2_v2
instance_count: 1
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Environment == nil || d.Environment.InferenceConfig["scoring_route"] == nil {
		t.Fatalf("environment = %+v, want its inference_config kept", d.Environment)
	}
	if d.CodeConfiguration == nil || d.CodeConfiguration.Code != "./scoring" {
		t.Fatalf("code_configuration = %+v, want code ./scoring", d.CodeConfiguration)
	}
}

// Fields of Azure's command job that change nothing on Ferry are kept;
// one whose effect Ferry lacks is refused with what to do instead.
func TestCommandJobAzureOnlyFields(t *testing.T) {
	j, err := ParseJob([]byte(`
command: python fit.py --out ${{outputs.fitted}}
compute: local
resources:
  instance_count: 1
  locations: [region-a]
notification_setting:
  emails: [team@example.org]
  email_on: [job_failed]
outputs:
  fitted:
    type: uri_folder
    description: the fitted model
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := j.Outputs["fitted"].Description; got != "the fitted model" {
		t.Errorf("outputs.fitted.description = %q", got)
	}
	if len(j.Resources.Locations) != 1 || j.NotificationSetting == nil {
		t.Errorf("resources.locations = %v, notification_setting = %v: want both kept", j.Resources.Locations, j.NotificationSetting)
	}
	// An output with name and version registers as a data asset when
	// the job completes; the two are a data asset's.
	j, err = ParseJob([]byte(`
command: python fit.py --out ${{outputs.fitted}}
outputs:
  fitted:
    name: fitted-model
    version: "2"
`))
	if err != nil || j.Outputs["fitted"].Name != "fitted-model" || j.Outputs["fitted"].Version != "2" {
		t.Fatalf("an output to register: %v, %+v", err, j)
	}
	for doc, want := range map[string]string{
		"outputs:\n  fitted:\n    version: \"2\"\n":                    "outputs.fitted.version (line 4): registers the output as a data asset with name:",
		"outputs:\n  fitted:\n    name: fitted\n    version: latest\n": "outputs.fitted.version (line 5): latest is a label",
		"outputs:\n  fitted:\n    name: \"-x\"\n":                      "outputs.fitted.name (line 4): \"-x\" is not a valid data asset name",
	} {
		_, err := ParseJob([]byte("command: python fit.py --out ${{outputs.fitted}}\n" + doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", doc, err, want)
		}
	}
}

// Azure's random sampling takes a log base for its Sobol rule.
func TestSweepSamplingLogbase(t *testing.T) {
	j, err := ParseJob([]byte(`
type: sweep
trial:
  command: python fit.py --lr ${{search_space.lr}}
  environment: azureml:AzureML-sklearn-1.0-ubuntu20.04-py38-cpu@latest
compute: local
sampling_algorithm: {type: random, rule: sobol, seed: 3, logbase: e}
search_space:
  lr: {type: loguniform, min_value: -5, max_value: -1}
objective: {goal: maximize, primary_metric: acc}
limits: {max_total_trials: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	if a := j.Sampling(); a.Logbase != "e" || a.Rule != "sobol" {
		t.Fatalf("sampling_algorithm = %+v, want rule sobol, logbase e", a)
	}
}

// The first CLI v2's private_network_connection is today's
// egress_public_network_access.
func TestDeploymentPrivateNetworkConnection(t *testing.T) {
	base := `
name: blue
endpoint_name: fares
model: {path: ./model}
code_configuration: {code: ./scoring, scoring_script: score.py}
environment: {image: registry.example.org/fare-server:2}
instance_type: Standard_DS2_v2
instance_count: 1
`
	for _, c := range []struct{ line, want string }{
		{"private_network_connection: true\n", "disabled"},
		{"private_network_connection: false\n", "enabled"},
	} {
		d, err := ParseOnlineDeployment([]byte(base+c.line), nil)
		if err != nil {
			t.Fatalf("%s: %v", c.line, err)
		}
		if d.EgressPublicNetworkAccess != c.want {
			t.Errorf("%s: egress_public_network_access = %q, want %q", c.line, d.EgressPublicNetworkAccess, c.want)
		}
	}
	_, err := ParseOnlineDeployment([]byte(base+"private_network_connection: true\negress_public_network_access: enabled\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "private_network_connection") {
		t.Fatalf("both spellings: err = %v, want one naming private_network_connection", err)
	}
}

// A job, step or component of a kind Ferry does not run is refused
// naming the kind, what Ferry runs, and what to write instead.
func TestOtherKindsSayWhatToDo(t *testing.T) {
	for typ, hint := range map[string]string{"automl": "sweep job", "spark": "PySpark", "parallel": "batch endpoint"} {
		_, err := ParseJob([]byte("type: " + typ + "\ncompute: local\n"))
		if err == nil || !strings.Contains(err.Error(), typ+" jobs are not supported") || !strings.Contains(err.Error(), hint) {
			t.Errorf("%s job: err = %v, want one naming %s and saying %q", typ, err, typ, hint)
		}
		_, err = ParsePipelineJob([]byte("type: pipeline\njobs:\n  s:\n    type: "+typ+"\n"), nil)
		if err == nil || !strings.Contains(err.Error(), typ+" steps are not supported") || !strings.Contains(err.Error(), hint) {
			t.Errorf("%s step: err = %v, want one naming %s and saying %q", typ, err, typ, hint)
		}
		_, err = ParseComponent([]byte("name: c\ntype: " + typ + "\n"))
		if err == nil || !strings.Contains(err.Error(), typ+" components are not supported") || !strings.Contains(err.Error(), hint) {
			t.Errorf("%s component: err = %v, want one naming %s and saying %q", typ, err, typ, hint)
		}
	}
}

// mode: mount, Azure's older name, is accepted on inputs (a read-only
// mount) and outputs (a read-write one), in jobs and pipelines.
func TestModeMount(t *testing.T) {
	if _, err := ParseJob([]byte(`
command: cp ${{inputs.a}} ${{outputs.b}}
compute: local
inputs:
  a: {type: uri_file, path: https://data.example.org/a.csv, mode: mount}
outputs:
  b: {type: uri_folder, mode: mount}
`)); err != nil {
		t.Errorf("job: %v", err)
	}
	if _, err := ParsePipelineJob([]byte(`
type: pipeline
outputs:
  o: {mode: mount}
jobs:
  s:
    command: echo hi > ${{outputs.x}}/f
    outputs:
      x: ${{parent.outputs.o}}
`), nil); err != nil {
		t.Errorf("pipeline: %v", err)
	}
}

// A prompt flow run file is named as such, not as a job with an unknown
// field.
func TestPromptFlowRunFile(t *testing.T) {
	_, err := ParseJob([]byte("flow: ./my_flow\ndescription: a run\n"))
	if err == nil || !strings.Contains(err.Error(), "prompt flow run file") {
		t.Fatalf("err = %v, want one saying it is a prompt flow run file", err)
	}
}

// settings.environment is the environment of the command steps that name
// none; a step's own environment wins.
func TestPipelineSettingsEnvironment(t *testing.T) {
	p, err := ParsePipelineJob([]byte(`
type: pipeline
settings:
  environment:
    image: python:3.11
jobs:
  plain:
    command: echo plain
  own:
    command: echo own
    environment: {image: busybox}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := p.Jobs["plain"].Environment; e == nil || e.Image != "python:3.11" {
		t.Errorf("plain's environment = %+v, want the settings' image python:3.11", e)
	}
	if e := p.Jobs["own"].Environment; e == nil || e.Image != "busybox" {
		t.Errorf("own's environment = %+v, want its own busybox", e)
	}
	if slices.Contains(p.Ignored, "settings.environment") {
		t.Errorf("settings.environment is listed as not used: %v", p.Ignored)
	}
}

// A tensor_board service's log_dir and an ssh service's ssh_public_keys
// are Azure's fields, read as written.
func TestServiceLogDirAndKeys(t *testing.T) {
	j, err := ParseJob([]byte(`
command: python fit.py
services:
  board:
    job_service_type: tensor_board
    log_dir: outputs/tblogs
  shell:
    type: ssh
    ssh_public_keys: ssh-ed25519 AAAAexample
    nodes: all
`))
	if err != nil {
		t.Fatal(err)
	}
	if s := j.Services["board"]; s.LogDir != "outputs/tblogs" {
		t.Errorf("board = %+v, want log_dir outputs/tblogs", s)
	}
	if s := j.Services["shell"]; s.SSHPublicKeys != "ssh-ed25519 AAAAexample" {
		t.Errorf("shell = %+v, want its key", s)
	}
}
