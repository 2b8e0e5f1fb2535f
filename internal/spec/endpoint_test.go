package spec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Azure's own endpoint and deployment files parse unchanged, fields that
// mean nothing here included, with Azure's defaults filled in.
func TestAzureEndpointAndDeploymentFilesParse(t *testing.T) {
	e, err := ParseOnlineEndpoint(readFile(t, "testdata/endpoint-azure.yml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.Name != "my-endpoint" || e.AuthMode != "key" || e.Traffic["blue"] != 90 || e.MirrorTraffic["shadow"] != 20 || e.PublicNetworkAccess != "enabled" {
		t.Errorf("endpoint: %+v", e)
	}
	d, err := ParseOnlineDeployment(readFile(t, "testdata/deployment-azure.yml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	zero, ten := 0, 10
	want := &OnlineDeployment{
		Schema: "https://azuremlschemas.azureedge.net/latest/managedOnlineDeployment.schema.json",
		Name:   "blue", EndpointName: "my-endpoint",
		Model:             &ModelRef{Path: "../../model-1/model/"},
		CodeConfiguration: &CodeConfiguration{Code: "../../model-1/onlinescoring/", ScoringScript: "score.py"},
		Environment:       &Environment{CondaFile: "../../model-1/environment/conda.yaml", Image: "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04:latest"},
		InstanceType:      "Standard_DS3_v2", InstanceCount: 1,
		AppInsightsEnabled: true, EgressPublicNetworkAccess: "disabled",
		DataCollector:   map[string]any{"collections": map[string]any{"model_inputs": map[string]any{"enabled": "True"}}},
		RequestSettings: &RequestSettings{RequestTimeoutMS: 3000, MaxConcurrentRequestsPerInstance: 2, MaxQueueWaitMS: DefaultMaxQueueWaitMS},
		LivenessProbe:   &Probe{InitialDelay: &zero, Period: 5, Timeout: 2, SuccessThreshold: 1, FailureThreshold: 30},
		ReadinessProbe:  &Probe{InitialDelay: &ten, Period: 10, Timeout: 2, SuccessThreshold: 1, FailureThreshold: 30},
		ScaleSettings:   &ScaleSettings{Type: "default"},
	}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("deployment (-want +got):\n%s", diff)
	}

	s, err := ParseOnlineDeployment(readFile(t, "testdata/deployment-scale.yml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	name, version, latest, ok := s.Model.RefParts()
	if !ok || name != "sklearn-model" || version != "" || !latest {
		t.Errorf("model reference %q: %q %q %v %v", s.Model.Ref, name, version, latest, ok)
	}
	if ss := s.ScaleSettings; *ss.MinInstances != 0 || ss.MaxInstances != 4 || ss.TargetUtilizationPercentage != DefaultTargetPercent || ss.ScaleToZeroAfter != DefaultScaleToZeroAfter || ss.PollingInterval != 1 {
		t.Errorf("scale settings after defaults: %+v", ss)
	}
}

// Every problem is named by its field, on its line, with what to do.
func TestEndpointAndDeploymentProblemsNameTheField(t *testing.T) {
	cases := []struct {
		name, file string
		deployment bool
		want       []string
	}{
		{"short name", "name: ab\n", false, []string{"name (line 1): must be 3 to 32 characters"}},
		{"name with a dot", "name: my.endpoint\n", false, []string{"name (line 1):", "only letters, digits and hyphens"}},
		{"aad", "name: ep1\nauth_mode: aad_token\n", false, []string{"auth_mode (line 2): aad_token", "use key or aml_token"}},
		{"traffic over 100", "name: ep1\ntraffic: {blue: 90, green: 20}\n", false, []string{"traffic (line 2): the percents add up to 110"}},
		{"mirror over 50", "name: ep1\nmirror_traffic: {green: 60}\n", false, []string{"mirror_traffic.green (line 2): must be a percent from 0 to 50"}},
		{"live and mirror", "name: ep1\ntraffic: {blue: 100}\nmirror_traffic: {blue: 10}\n", false, []string{"mirror_traffic.blue (line 3):", "live or mirrored traffic, not both"}},
		{"unknown field", "name: ep1\nauth_mod: key\n", false, []string{"auth_mod (line 2):"}},
		{"no endpoint", "name: blue\ncode_configuration: {code: c, scoring_script: s.py}\n", true, []string{"endpoint_name: is required", "--endpoint-name"}},
		{"no scoring script", "name: blue\nendpoint_name: ep1\ncode_configuration: {code: c}\n", true, []string{"code_configuration.scoring_script (line 3): is required"}},
		{"bad model ref", "name: blue\nendpoint_name: ep1\nmodel: 'azureml:x:y:z'\ncode_configuration: {code: c, scoring_script: s.py}\n", true, []string{"model (line 3):", "not a valid version"}},
		{"model ref with path", "name: blue\nendpoint_name: ep1\nmodel: {ref: 'm:1', path: x}\ncode_configuration: {code: c, scoring_script: s.py}\n", true, []string{"model (line 3): a reference", "stands alone"}},
		{"model list", "name: blue\nendpoint_name: ep1\nmodel: [a]\ncode_configuration: {code: c, scoring_script: s.py}\n", true, []string{"model (line 3): must be a reference"}},
		{"timeout", "name: blue\nendpoint_name: ep1\ncode_configuration: {code: c, scoring_script: s.py}\nrequest_settings: {request_timeout_ms: 200000}\n", true, []string{"request_settings.request_timeout_ms (line 4): must be from 1 to 180000"}},
		{"scale mix", "name: blue\nendpoint_name: ep1\ncode_configuration: {code: c, scoring_script: s.py}\nscale_settings: {type: default, max_instances: 3}\n", true, []string{"scale_settings (line 4):", "type: target_utilization"}},
		{"scale bounds", "name: blue\nendpoint_name: ep1\ncode_configuration: {code: c, scoring_script: s.py}\nscale_settings: {type: target_utilization, min_instances: 3, max_instances: 2}\n", true, []string{"scale_settings.max_instances (line 4): must be from 3"}},
		{"variable", "name: blue\nendpoint_name: ep1\ncode_configuration: {code: c, scoring_script: s.py}\nenvironment_variables: {FERRY_X: y}\n", true, []string{"environment_variables.FERRY_X (line 4):", "reserved"}},
		{"typo", "name: blue\nendpoint_name: ep1\ncode_configuration: {code: c, scoring_script: s.py}\ninstace_count: 2\n", true, []string{"instace_count (line 4):", "instance_count"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.deployment {
				_, err = ParseOnlineDeployment([]byte(c.file), nil)
			} else {
				_, err = ParseOnlineEndpoint([]byte(c.file), nil)
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// `--set` reaches the deployment file as for jobs: the CLI sets the
// endpoint's name this way.
func TestDeploymentSet(t *testing.T) {
	d, err := ParseOnlineDeployment([]byte("name: blue\ncode_configuration: {code: c, scoring_script: s.py}\n"), []string{"endpoint_name=ep1", "instance_count=3"})
	if err != nil {
		t.Fatal(err)
	}
	if d.EndpointName != "ep1" || d.InstanceCount != 3 {
		t.Errorf("after --set: %q, %d", d.EndpointName, d.InstanceCount)
	}
}

func TestParseTraffic(t *testing.T) {
	for in, want := range map[string]map[string]int{
		"blue=90 green=10":  {"blue": 90, "green": 10},
		"blue=100":          {"blue": 100},
		"blue=50%,green=50": {"blue": 50, "green": 50},
		"":                  {},
	} {
		got, err := ParseTraffic(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%q (-want +got):\n%s", in, d)
		}
		if back, err := ParseTraffic(FormatTraffic(got)); err != nil || !cmp.Equal(back, got) {
			t.Errorf("%q does not come back through FormatTraffic: %v %v", in, back, err)
		}
	}
	for in, want := range map[string]string{
		"blue":                      "not DEPLOYMENT=PERCENT",
		"=5":                        "not DEPLOYMENT=PERCENT",
		"blue=x":                    "not a whole percent",
		"blue=1 blue=2":             "given twice",
		"blue=99999999999999999999": "not a whole percent",
	} {
		if _, err := ParseTraffic(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", in, err, want)
		}
	}
}

// FuzzParseOnlineDeployment checks that no input makes the parser panic,
// that every error is an Errors, and that a deployment it accepts comes
// back unchanged through the API's JSON.
func FuzzParseOnlineDeployment(f *testing.F) {
	for _, p := range glob(f, "testdata/deployment-*.yml") {
		f.Add(readFile(f, p))
	}
	f.Add([]byte("name: blue\nendpoint_name: ep1\nmodel: {path: m}\ncode_configuration: {code: c, scoring_script: s.py}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseOnlineDeployment(data, nil)
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
		back, err := DecodeOnlineDeploymentJSON(raw)
		if err != nil {
			t.Fatalf("accepted YAML, refused its JSON: %v\n%s", err, raw)
		}
		if diff := cmp.Diff(d, back); diff != "" {
			t.Fatalf("JSON round trip (-yaml +json):\n%s", diff)
		}
	})
}

// FuzzParseOnlineEndpoint is FuzzParseOnlineDeployment for endpoints.
func FuzzParseOnlineEndpoint(f *testing.F) {
	for _, p := range glob(f, "testdata/endpoint-*.yml") {
		f.Add(readFile(f, p))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ParseOnlineEndpoint(data, nil)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %v (%T) is not an Errors", err, err)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("parsed endpoint does not validate: %v", err)
		}
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeOnlineEndpointJSON(raw)
		if err != nil {
			t.Fatalf("accepted YAML, refused its JSON: %v\n%s", err, raw)
		}
		if diff := cmp.Diff(e, back); diff != "" {
			t.Fatalf("JSON round trip (-yaml +json):\n%s", diff)
		}
	})
}

// FuzzParseTraffic checks that every split ParseTraffic accepts comes back
// through FormatTraffic unchanged.
func FuzzParseTraffic(f *testing.F) {
	f.Add("blue=90 green=10")
	f.Add("a=1,b=2%")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTraffic(s)
		if err != nil {
			return
		}
		back, err := ParseTraffic(FormatTraffic(got))
		if err != nil || !cmp.Equal(back, got) {
			t.Fatalf("%q -> %v -> %q -> %v, %v", s, got, FormatTraffic(got), back, err)
		}
	})
}
