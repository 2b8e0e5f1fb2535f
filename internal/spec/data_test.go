package spec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDataAccepts(t *testing.T) {
	f, err := ParseData([]byte(`$schema: https://azuremlschemas.azureedge.net/latest/data.schema.json
name: cloud-file-example
version: '1'
type: uri_file
path: ./data/titanic.csv
description: Data asset created from a local file.
tags: {source: kaggle}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &DataFile{
		Schema: "https://azuremlschemas.azureedge.net/latest/data.schema.json",
		Name:   "cloud-file-example", Version: "1", Type: "uri_file", Path: "./data/titanic.csv",
		Description: "Data asset created from a local file.", Tags: map[string]string{"source": "kaggle"},
	}
	if d := cmp.Diff(want, f); d != "" {
		t.Errorf("ParseData (-want +got):\n%s", d)
	}
	// type defaults to uri_folder, as in Azure; --set makes one from nothing.
	f, err = ParseData([]byte("name: d\npath: ./data\n"), nil)
	if err != nil || f.Type != "uri_folder" || f.Version != "" {
		t.Errorf("minimal data: %+v, %v; want type uri_folder and no version", f, err)
	}
	if f, err := ParseData(nil, []string{"name=d", "path=.", "version=3"}); err != nil || f.Version != "3" {
		t.Errorf("data from --set alone: %+v, %v", f, err)
	}
}

func TestParseDataRefuses(t *testing.T) {
	for in, want := range map[string][]string{
		"path: d\n":                           {"name", "needs a name"},
		"name: bad name\npath: d\n":           {"name", "line 1", "not a valid name"},
		"name: a\npath: d\nversion: 1/2\n":    {"version", "line 3", "not a valid version"},
		"name: a\npath: d\nversion: latest\n": {"version", "a label"},
		"name: a\n":                           {"path", "needs its files"},
		"name: a\npath: d\ntype: table\n":     {"type", "line 3", "uri_folder, uri_file"},
		"name: a\npath: d\nformat: csv\n":     {"format", "line 3", "unknown field"},
		"name: a\npath: d\ntags: [a]\n":       {"tags"},
		"":                                    {"empty"},
	} {
		_, err := ParseData([]byte(in), nil)
		var es Errors
		if !errors.As(err, &es) {
			t.Errorf("%q: got %v, want Errors", in, err)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not mention %q", in, err, w)
			}
		}
	}
}

func TestParseDataRef(t *testing.T) {
	for ref, want := range map[string][2]string{
		"azureml:cifar:3":      {"cifar", "3"},
		"azureml:cifar@latest": {"cifar", "latest"},
		"azureml:my_data.x:1":  {"my_data.x", "1"},
	} {
		n, v, err := ParseDataRef(ref)
		if err != nil || n != want[0] || v != want[1] {
			t.Errorf("ParseDataRef(%q) = %q, %q, %v; want %q, %q", ref, n, v, err, want[0], want[1])
		}
	}
	for ref, want := range map[string]string{
		"azureml:cifar":        "say which version",
		"cifar@latest":         "azureml:NAME:VERSION",
		"azureml://datastores": "azureml:NAME:VERSION",
		"azureml:bad name:1":   "not a valid data asset name",
		"azureml:cifar:1/2":    "not a valid version",
	} {
		if _, _, err := ParseDataRef(ref); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDataRef(%q): got %v, want an error saying %q", ref, err, want)
		}
	}
	// A job names a bad reference at the input's path.
	_, err := ParseJob([]byte("command: ls\ninputs:\n  d: {type: uri_folder, path: 'azureml:cifar'}\n"))
	if err == nil || !strings.Contains(err.Error(), "inputs.d.path") || !strings.Contains(err.Error(), "say which version") {
		t.Errorf("a job with azureml:cifar: %v", err)
	}
}

// FuzzParseData checks that no input makes ParseData panic, that every
// error is an Errors, and that every data file it accepts comes back
// unchanged through the API's JSON.
func FuzzParseData(f *testing.F) {
	f.Add([]byte("name: a\npath: ./data\n"))
	f.Add([]byte("name: a\nversion: '2'\ntype: uri_file\npath: x.csv\ndescription: d\ntags: {x: '1'}\n"))
	f.Add([]byte("$schema: s\nname: a\npath: d\ntype: mltable\n"))
	f.Add([]byte("name: a\ndatastore: azureml:nfs\npath: ./t/rows.csv\ntype: uri_file\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseData(data, nil)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %v (%T) is not an Errors", err, err)
			}
			return
		}
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeDataJSON(raw)
		if err != nil {
			t.Fatalf("accepted YAML, refused its JSON: %v\n%s", err, raw)
		}
		if d := cmp.Diff(d, back); d != "" {
			t.Fatalf("JSON round trip (-yaml +json):\n%s", d)
		}
	})
}
