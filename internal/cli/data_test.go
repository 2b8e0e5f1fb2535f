package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `ferry data create` uploads a folder content-addressed (unchanged
// files are not sent again), and list, show, download and archive work on
// what it registered.
func TestDataCreateListShowDownloadArchive(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"data/a.txt":     "alpha\n",
		"data/sub/b.txt": "beta\n",
		"data.yml":       "$schema: https://azuremlschemas.azureedge.net/latest/data.schema.json\nname: mydata\ntype: uri_folder\npath: ./data\ndescription: two files\ntags: {split: train}\n",
	})
	file := filepath.Join(dir, "data.yml")

	var d apitypes.DataAsset
	r := s.ferry(t, "data", "create", "-f", file, "-o", "json")
	mustJSON(t, r, &d)
	if d.Name != "mydata" || d.Version != "1" || d.Type != "uri_folder" || d.Tags["split"] != "train" || d.ID != "azureml:mydata:1" {
		t.Errorf("first create: %+v", d)
	}
	if !strings.Contains(r.stderr, "path: uploaded 2 files") {
		t.Errorf("first create did not upload both files: %s", r)
	}
	// Unchanged: nothing is sent, and it is the same version.
	r = s.ferry(t, "data", "create", "-f", file, "-o", "json")
	mustJSON(t, r, &d)
	if d.Version != "1" || !strings.Contains(r.stderr, "all 2 files were already in the workspace; nothing to upload") {
		t.Errorf("second create: version %s; %s", d.Version, r)
	}
	// One file changed: a new version, and only that file is sent.
	writeFiles(t, dir, map[string]string{"data/a.txt": "ALPHA 2\n"})
	r = s.ferry(t, "data", "create", "-f", file, "-o", "json")
	mustJSON(t, r, &d)
	if d.Version != "2" || !strings.Contains(r.stderr, "path: uploaded 1 of 2 files") {
		t.Errorf("create after a change: version %s; %s", d.Version, r)
	}

	r = s.ferry(t, "data", "list")
	if r.code != 0 || strings.Count(r.stdout, "mydata") != 2 || !strings.Contains(r.stdout, "uri_folder") {
		t.Errorf("data list: %s", r)
	}
	mustJSON(t, s.ferry(t, "data", "show", "mydata@latest", "-o", "json"), &d)
	if d.Version != "2" {
		t.Errorf("show mydata@latest: version %s, want 2", d.Version)
	}
	r = s.ferry(t, "data", "show", "mydata", "--version", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "path: azureml:mydata:1") {
		t.Errorf("show --version 1: %s", r)
	}

	out := t.TempDir()
	if r := s.ferry(t, "data", "download", "mydata", "--version", "1", "--download-path", out); r.code != 0 {
		t.Fatalf("download: %s", r)
	}
	for p, want := range map[string]string{"mydata/a.txt": "alpha\n", "mydata/sub/b.txt": "beta\n"} {
		if got, err := os.ReadFile(filepath.Join(out, p)); err != nil || string(got) != want {
			t.Errorf("downloaded %s: %q, %v; want %q", p, got, err, want)
		}
	}

	if r := s.ferry(t, "data", "archive", "mydata", "--version", "2"); r.code != 0 {
		t.Fatalf("archive: %s", r)
	}
	mustJSON(t, s.ferry(t, "data", "show", "mydata", "--label", "latest", "-o", "json"), &d)
	if d.Version != "1" {
		t.Errorf("latest after archiving 2: %s, want 1", d.Version)
	}
	r = s.ferry(t, "data", "list")
	if strings.Count(r.stdout, "mydata") != 1 {
		t.Errorf("data list after archiving 2 still lists it: %s", r)
	}
	r = s.ferry(t, "data", "list", "--include-archived")
	if !strings.Contains(r.stdout, "2 (archived)") {
		t.Errorf("data list --include-archived: %s", r)
	}

	// A bad file names the field.
	writeFiles(t, dir, map[string]string{"bad.yml": "name: mydata\ntype: table\npath: ./data\n"})
	r = s.ferry(t, "data", "create", "-f", filepath.Join(dir, "bad.yml"))
	if r.code == 0 || !strings.Contains(r.stderr, "bad.yml: type (line 2):") || !strings.Contains(r.stderr, "not a data type") {
		t.Errorf("type table: %s", r)
	}
	r = s.ferry(t, "data", "create", "-f", file, "--set", "type=uri_file")
	if r.code == 0 || !strings.Contains(r.stderr, "path: ") || !strings.Contains(r.stderr, "is a folder, but its type is uri_file") {
		t.Errorf("a folder as uri_file: %s", r)
	}
}

// A job input that names a registered data asset runs with its files
// (here: a folder at @latest, whose newest version is archived, and a
// file by its version); a reference to an asset that does not exist is
// refused before anything is uploaded, and a type that is not the
// asset's is refused naming the field.
func TestJobInputFromRegisteredData(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"data/a.txt":     "alpha\n",
		"data/sub/b.txt": "beta\n",
		"data.yml":       "name: mydata\npath: ./data\n",
		"labels.csv":     "cat,dog\n",
		"labels.yml":     "name: labels\ntype: uri_file\npath: labels.csv\nversion: '7'\n",
		"src/train.py":   "print('never run')\n",
		"job.yml": `command: cat ${{inputs.d}}/a.txt ${{inputs.d}}/sub/b.txt ${{inputs.l}}
compute: local
inputs:
  d: {type: uri_folder, path: azureml:mydata@latest}
  l: {type: uri_file, path: azureml:labels:7}
`,
		"unknown.yml": `command: python train.py ${{inputs.d}}
code: ./src
compute: local
inputs:
  d: {type: uri_folder, path: azureml:mydta@latest}
`,
		"mismatch.yml": `command: cat ${{inputs.d}}
code: ./src
compute: local
inputs:
  d:
    type: uri_file
    path: azureml:mydata:1
`,
	})
	for _, f := range []string{"data.yml", "labels.yml"} {
		if r := s.ferry(t, "data", "create", "-f", filepath.Join(dir, f)); r.code != 0 {
			t.Fatalf("data create %s: %s", f, r)
		}
	}
	// Version 2 is archived: @latest is still 1.
	writeFiles(t, dir, map[string]string{"data/a.txt": "archived\n"})
	if r := s.ferry(t, "data", "create", "-f", filepath.Join(dir, "data.yml")); r.code != 0 {
		t.Fatalf("data create v2: %s", r)
	}
	if r := s.ferry(t, "data", "archive", "mydata", "--version", "2"); r.code != 0 {
		t.Fatalf("archive: %s", r)
	}

	r := s.ferry(t, "job", "create", "-f", filepath.Join(dir, "job.yml"), "--stream")
	if r.code != 0 || !strings.Contains(r.stdout, "alpha\nbeta\ncat,dog\n") {
		t.Errorf("job with registered inputs: %s", r)
	}
	if strings.Contains(r.stderr, "inputs.") {
		t.Errorf("registered inputs were uploaded: %s", r)
	}

	r = s.ferry(t, "job", "create", "-f", filepath.Join(dir, "unknown.yml"))
	if r.code == 0 || !strings.Contains(r.stderr, "unknown.yml:5: inputs.d.path:") || !strings.Contains(r.stderr, "did you mean mydata?") {
		t.Errorf("an unknown data asset: %s", r)
	}
	if strings.Contains(r.stderr, "upload") {
		t.Errorf("the code was uploaded before the reference was checked: %s", r)
	}

	r = s.ferry(t, "job", "create", "-f", filepath.Join(dir, "mismatch.yml"))
	if r.code == 0 || !strings.Contains(r.stderr, "mismatch.yml:6: inputs.d.type:") || !strings.Contains(r.stderr, "azureml:mydata:1 is uri_folder") {
		t.Errorf("a type mismatch: %s", r)
	}
	if strings.Contains(r.stderr, "upload") {
		t.Errorf("the code was uploaded before the type was checked: %s", r)
	}
}

// An mltable data asset is its folder (the MLTable file and the files it
// names); an mltable input may name it, or a uri_folder asset, as Azure's
// pipelines read v1 datasets. A file is not an mltable.
func TestMLTableDataAsset(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"table/MLTable":  "paths:\n  - file: ./rows.csv\n",
		"table/rows.csv": "a,b\n1,2\n",
		"table.yml":      "name: rows-table\ntype: mltable\npath: ./table\n",
		"plain/x.txt":    "plain folder\n",
		"plain.yml":      "name: plain-folder\npath: ./plain\n",
		"onefile.yml":    "name: not-a-table\ntype: mltable\npath: ./table/rows.csv\n",
		"job.yml": `command: cat ${{inputs.t}}/MLTable ${{inputs.t}}/rows.csv ${{inputs.f}}/x.txt
compute: local
inputs:
  t: {type: mltable, path: azureml:rows-table@latest}
  f: {type: mltable, path: azureml:plain-folder:1}
`,
	})
	for _, f := range []string{"table.yml", "plain.yml"} {
		if r := s.ferry(t, "data", "create", "-f", filepath.Join(dir, f)); r.code != 0 {
			t.Fatalf("data create %s: %s", f, r)
		}
	}
	r := s.ferry(t, "data", "create", "-f", filepath.Join(dir, "onefile.yml"))
	if r.code == 0 || !strings.Contains(r.stderr, "an mltable is a folder") {
		t.Errorf("a file as an mltable: %s", r)
	}
	r = s.ferry(t, "job", "create", "-f", filepath.Join(dir, "job.yml"), "--stream")
	if r.code != 0 || !strings.Contains(r.stdout, "paths:\n  - file: ./rows.csv\na,b\n1,2\nplain folder\n") {
		t.Errorf("a job reading mltable inputs: %s", r)
	}
}
