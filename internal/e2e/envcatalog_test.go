package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// TestCatalogEnvironments runs Azure's curated environment references
// through a site catalog that maps them to the local test image, as a site
// without access to Microsoft's registry would.
func TestCatalogEnvironments(t *testing.T) {
	testutil.RequireBaseImage(t)
	removeNewEnvironmentImages(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"catalog.yml": `environments:
  - name: AzureML-sklearn-1.0-ubuntu20.04-py38-cpu
    description: the test image standing in for Microsoft's
    python: "3.11"
    frameworks: [none]
    versions:
      - {version: "1", image: ` + testutil.BaseImage + `}
  - name: AzureML-lab-2.0
    versions:
      - {version: "7", image: ferry-no-such-image:7}
`,
		"job.yml": `$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json
command: python3 -c "import sys; print('curated', 6*7, sys.version_info[0])"
environment: azureml:AzureML-sklearn-1.0-ubuntu20.04-py38-cpu@latest
`,
		"lab-env.yml": "name: AzureML-lab-2.0\nimage: " + testutil.BaseImage + "\n",
	})
	s := startServer(t, "--environment-catalog", filepath.Join(dir, "catalog.yml"))
	job := filepath.Join(dir, "job.yml")

	// Both of Azure's spellings run in the catalog's image.
	mustContain(t, "@latest", s.mustFerry("job", "create", "-f", job, "--stream", "--name", "cat-1").stdout, "curated 42 3")
	reg := "environment=azureml://registries/azureml/environments/sklearn-1.0-ubuntu20.04-py38-cpu/versions/1"
	mustContain(t, "registry form", s.mustFerry("job", "create", "-f", job, "--stream", "--set", reg).stdout, "curated 42 3")

	// A version the catalog lacks is refused before any job is made, with
	// the versions it has.
	before := countJobs(t, s)
	r := s.ferry("job", "create", "-f", job, "--set", "environment=azureml:AzureML-sklearn-1.0-ubuntu20.04-py38-cpu:5")
	if r.code == 0 {
		t.Fatalf("a version the catalog lacks was taken: %s", r)
	}
	mustContain(t, "unknown version", r.stderr, "has no version 5", "the catalog has 1")
	if n := countJobs(t, s); n != before {
		t.Errorf("a refused job was stored: %d jobs, want %d", n, before)
	}

	// An image the node cannot pull still resolves; the job fails at
	// Preparing with the engine's words, as an inline image would.
	r = s.ferry("job", "create", "-f", job, "--stream", "--name", "cat-missing", "--set", "environment=azureml:AzureML-lab-2.0@latest")
	if r.code == 0 {
		t.Fatalf("a job on an image nobody has ran: %s", r)
	}
	mustContain(t, "unpullable image", r.stdout, "ferry-no-such-image:7", "could not be pulled")
	if j := s.show("cat-missing"); j.StatusReason != "environment build failed" {
		t.Errorf("cat-missing: %s (%s)", j.Status, j.StatusReason)
	}

	// A curated environment is built (pulled) ahead of jobs like a
	// registered one; a name that is neither is refused with both said.
	s.mustFerry("environment", "build", "azureml://registries/azureml/environments/sklearn-1.0-ubuntu20.04-py38-cpu/labels/latest", "--compute", "local")
	s.mustFerry("environment", "build", "AzureML-sklearn-1.0-ubuntu20.04-py38-cpu:1", "--compute", "local")
	r = s.ferry("environment", "build", "no-such-env@latest", "--compute", "local")
	if r.code == 0 {
		t.Fatalf("building an environment nobody has worked: %s", r)
	}
	mustContain(t, "unknown build", r.stderr, "no-such-env", "not registered", "nor is it in the catalog")

	// Registering an environment of the same name replaces the catalog's.
	s.mustFerry("environment", "create", "-f", filepath.Join(dir, "lab-env.yml"))
	mustContain(t, "registered wins", s.mustFerry("job", "create", "-f", job, "--stream", "--set", "environment=azureml:AzureML-lab-2.0@latest").stdout, "curated 42 3")

	// The listing shows the site's entries and the built-in ones.
	var list []struct {
		Name       string `json:"name"`
		Repository string `json:"repository"`
		Versions   []struct{ Version, Image string }
	}
	if err := json.Unmarshal([]byte(s.mustFerry("environment", "list", "--catalog", "-o", "json").stdout), &list); err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	for i, e := range list {
		byName[e.Name] = i
	}
	if i, ok := byName["AzureML-sklearn-1.0-ubuntu20.04-py38-cpu"]; !ok || len(list[i].Versions) != 1 || list[i].Versions[0].Image != testutil.BaseImage {
		t.Errorf("the site catalog did not replace AzureML-sklearn-1.0-ubuntu20.04-py38-cpu: %+v", list)
	}
	if i, ok := byName["AzureML-sklearn-1.5"]; !ok || list[i].Repository != "mcr.microsoft.com/azureml/curated/sklearn-1.5" {
		t.Errorf("the built-in AzureML-sklearn-1.5 is missing: %+v", list)
	}
	mustContain(t, "catalog table", s.mustFerry("environment", "list", "--catalog").stdout,
		"NAME", "VERSIONS", "IMAGE", "AzureML-sklearn-1.0-ubuntu20.04-py38-cpu", testutil.BaseImage, "Python 3.11",
		"AzureML-acpt-pytorch-2.2-cuda12.1", "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:VERSION")

	// A bad catalog file stops the server with a message naming the entry.
	bad := filepath.Join(dir, "bad.yml")
	if err := os.WriteFile(bad, []byte("environments:\n  - {name: x, versions: [{version: '1', image: 'Bad Image'}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ferryBin, "server", "--data-dir", t.TempDir(), "--addr", freeAddr(t), "--environment-catalog", bad).CombinedOutput()
	if err == nil {
		t.Fatalf("a server with a bad environment catalog started:\n%s", out)
	}
	mustContain(t, "bad catalog", string(out), "--environment-catalog", "environments[0] (x)", "image")
}

// TestEnvironmentFileReference runs a job whose environment is a file
// beside it (environment: file:PATH), whose own paths are relative to it.
func TestEnvironmentFileReference(t *testing.T) {
	offlineWheels(t)
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"jobs/job.yml": `command: python -c "import ferrytestpkg; print('value', ferrytestpkg.VALUE)"
environment: file:../envs/env.yml
`,
		"envs/env.yml": `$schema: https://azuremlschemas.azureedge.net/latest/environment.schema.json
python:
  requirements: requirements.txt
`,
		"envs/requirements.txt": "ferrytestpkg==2.0\n",
	})
	job := filepath.Join(dir, "jobs", "job.yml")
	mustContain(t, "file: environment", s.mustFerry("job", "create", "-f", job, "--stream").stdout, "value 43")

	for ref, want := range map[string][]string{
		"file:../envs/nope.yml": {"environment: ../envs/nope.yml does not exist", "relative to"},
		"file:job.yml":          {"job.yml (the environment file of", "command"},
	} {
		r := s.ferry("job", "create", "-f", job, "--set", "environment="+ref)
		if r.code == 0 {
			t.Errorf("environment %s was taken", ref)
		}
		mustContain(t, ref, r.stderr, want...)
	}
}
