package spec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Azure's batch files parse unchanged, in both of Azure's shapes (the
// scoring settings under settings: and at the top level), with Azure's
// defaults filled in.
func TestAzureBatchFilesParse(t *testing.T) {
	e, err := ParseBatchEndpoint(readFile(t, "testdata/batch-endpoint-azure.yml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.Name != "mnist-batch" || e.AuthMode != "aad_token" || e.DefaultDeployment() != "mnist-torch-dpl" || e.Tags["type"] != "deep-learning" {
		t.Errorf("endpoint: %+v", e)
	}

	d, err := ParseBatchDeployment(readFile(t, "testdata/batch-deployment-azure.yml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	three, minus1 := 3, -1
	want := &BatchDeployment{
		Schema:                    "https://azuremlschemas.azureedge.net/latest/modelBatchDeployment.schema.json",
		Name:                      "mnist-torch-dpl",
		Description:               "A deployment using Torch to solve the MNIST classification dataset.",
		EndpointName:              "mnist-batch",
		Type:                      "model",
		Model:                     &ModelRef{Name: "mnist-classifier-torch", Path: "model"},
		CodeConfiguration:         &CodeConfiguration{Code: "code", ScoringScript: "batch_driver.py"},
		Environment:               &Environment{Name: "batch-torch-py38", Image: "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04:latest", CondaFile: "environment/conda.yaml"},
		Compute:                   "azureml:batch-cluster",
		Resources:                 &BatchResources{InstanceCount: 1},
		MaxConcurrencyPerInstance: 2, MiniBatchSize: 10,
		RetrySettings:  &RetrySettings{MaxRetries: &three, Timeout: 30},
		ErrorThreshold: &minus1, LoggingLevel: "info", OutputAction: "append_row", OutputFileName: "predictions.csv",
	}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("settings: form (-want +got):\n%s", diff)
	}

	d, err = ParseBatchDeployment(readFile(t, "testdata/batch-deployment-toplevel.yml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Azure's MLflow deployments have no scoring script.
	if m, err := ParseBatchDeployment(readFile(t, "testdata/batch-deployment-mlflow.yml"), nil); err != nil || m.CodeConfiguration != nil || m.Environment != nil {
		t.Errorf("MLflow deployment: %+v, %v", m, err)
	}
	if d.Model.Ref != "azureml:my-classifier@latest" || d.ComputeName() != "cpu-cluster" || d.Resources.InstanceCount != 4 ||
		d.MiniBatchSize != 100 || *d.RetrySettings.MaxRetries != 0 || d.RetrySettings.Timeout != 300 || *d.ErrorThreshold != 5 ||
		d.OutputAction != "summary_only" || d.OutputFileName != DefaultBatchOutputFileName || d.EnvironmentVariables["MODE"] != "fast" {
		t.Errorf("top-level form: %+v", d)
	}
}

// The defaults of a deployment that gives only what it must.
func TestBatchDeploymentDefaults(t *testing.T) {
	d, err := ParseBatchDeployment([]byte("name: dep1\nendpoint_name: ep1\ncompute: local\ncode_configuration: {code: c, scoring_script: s.py}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Type != "model" || d.Resources.InstanceCount != 1 || d.MaxConcurrencyPerInstance != 1 || d.MiniBatchSize != 10 ||
		*d.RetrySettings.MaxRetries != 3 || d.RetrySettings.Timeout != 30 || *d.ErrorThreshold != -1 ||
		d.LoggingLevel != "info" || d.OutputAction != "append_row" || d.OutputFileName != "predictions.csv" {
		t.Errorf("defaults: %+v", d)
	}
}

// Bad files are refused with the field, its line and what to do.
func TestBatchDeploymentRefusals(t *testing.T) {
	base := "name: dep1\nendpoint_name: ep1\ncompute: azureml:c1\ncode_configuration: {code: c, scoring_script: s.py}\n"
	for _, tc := range []struct{ yaml, want string }{
		{base + "mini_batch_size: -2\n", "must be from 1 to 100000 files, got -2"},
		{base + "mini_batch_size: 10kb\n", "mini_batch_size"},
		{base + "max_concurrency_per_instance: 1000\n", "must be from 1 to 256 workers"},
		{base + "error_threshold: -5\n", "error_threshold (line 5): must be -1 (no limit)"},
		{base + "output_action: append_rows\n", "output_action"},
		{base + "output_file_name: out/p.csv\n", "output_file_name"},
		{base + "logging_level: loud\n", "logging_level"},
		{base + "retry_settings: {max_retries: -1}\n", "retry_settings.max_retries (line 5): must be from 0 to 100"},
		{base + "retry_settings: {timeout: -1}\n", "retry_settings.timeout"},
		{base + "resources: {instance_count: -1}\n", "resources.instance_count"},
		{base + "mini_batch_size: 5\nsettings: {mini_batch_size: 6}\n", "settings.mini_batch_size (line 6): is given at the top level too"},
		{base + "settings: {mini_batch: 6}\n", "mini_batch"},
		{base + "instance_count: 2\n", "instance_count"},
		{"name: dep1\nendpoint_name: ep1\ncode_configuration: {code: c, scoring_script: s.py}\n", "compute: is required"},
		{"name: dep1\nendpoint_name: ep1\ncompute: c1\n", "code_configuration: is required"},
		{"name: dep1\nendpoint_name: ep1\ncompute: c1\ncode_configuration: {code: c}\n", "code_configuration.scoring_script (line 4): is required"},
		{"name: dep1\ncompute: c1\ncode_configuration: {code: c, scoring_script: s.py}\n", "endpoint_name: is required"},
		{"type: pipeline\nname: dep1\nendpoint_name: ep1\ncomponent: azureml:c:1\n", "pipeline batch deployments"},
	} {
		_, err := ParseBatchDeployment([]byte(tc.yaml), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error saying %q", tc.yaml, err, tc.want)
		}
	}
	if _, err := ParseBatchDeployment([]byte(base+"mini_batch_size: 0\nsettings:\n  error_threshold: -9\n"), nil); err == nil || !strings.Contains(err.Error(), "settings.error_threshold (line 7)") {
		t.Errorf("an error in settings: does not name its line: %v", err)
	}
	if _, err := ParseBatchEndpoint([]byte("name: e\n"), nil); err == nil || !strings.Contains(err.Error(), "must be 3 to 32 characters") {
		t.Errorf("short endpoint name: %v", err)
	}
	if _, err := ParseBatchEndpoint([]byte("name: ep1\nauth_mode: magic\n"), nil); err == nil || !strings.Contains(err.Error(), "auth_mode") {
		t.Errorf("bad auth_mode: %v", err)
	}
}

// FuzzParseBatchDeployment checks that no input makes the parser panic,
// that every error is an Errors, and that a deployment it accepts comes
// back unchanged through the API's JSON.
func FuzzParseBatchDeployment(f *testing.F) {
	for _, p := range glob(f, "testdata/batch-deployment-*.yml") {
		f.Add(readFile(f, p))
	}
	f.Add([]byte("name: dep1\nendpoint_name: ep1\ncompute: c\ncode_configuration: {code: c, scoring_script: s.py}\nsettings: {mini_batch_size: 3, error_threshold: 0}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseBatchDeployment(data, nil)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %v (%T) is not an Errors", err, err)
			}
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("parsed deployment does not validate: %v", err)
		}
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeBatchDeploymentJSON(raw)
		if err != nil {
			t.Fatalf("accepted YAML, refused its JSON: %v\n%s", err, raw)
		}
		if diff := cmp.Diff(d, back); diff != "" {
			t.Fatalf("JSON round trip (-yaml +json):\n%s", diff)
		}
	})
}

// FuzzParseBatchEndpoint is FuzzParseBatchDeployment for endpoints.
func FuzzParseBatchEndpoint(f *testing.F) {
	for _, p := range glob(f, "testdata/batch-endpoint-*.yml") {
		f.Add(readFile(f, p))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ParseBatchEndpoint(data, nil)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %v (%T) is not an Errors", err, err)
			}
			return
		}
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeBatchEndpointJSON(raw)
		if err != nil {
			t.Fatalf("accepted YAML, refused its JSON: %v\n%s", err, raw)
		}
		if diff := cmp.Diff(e, back); diff != "" {
			t.Fatalf("JSON round trip (-yaml +json):\n%s", diff)
		}
	})
}
