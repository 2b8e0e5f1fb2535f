package environment

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseCondaFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		want       *condaFile
		err        string
	}{
		{
			name: "pip only",
			yaml: "name: demo\nchannels: [conda-forge]\ndependencies:\n  - python=3.11\n  - pip\n  - pip:\n      - ferrytestpkg==1.0\n      - requests>=2\n",
			want: &condaFile{Name: "demo", Channels: []string{"conda-forge"},
				Deps: []condaDep{{"python=3.11", "python", "=3.11"}, {"pip", "pip", ""}},
				Pip:  []string{"ferrytestpkg==1.0", "requests>=2"}},
		},
		{
			name: "match spec forms",
			yaml: "dependencies:\n- conda-forge::NumPy >=1.2, <2\n- python 3.11.* *_cpython\n- python=3.11.2=h123_0\n- scipy\n- pip:\n  - a\n- pip: [b]\n",
			want: &condaFile{
				Deps: []condaDep{{"conda-forge::NumPy >=1.2, <2", "numpy", ">=1.2,<2"}, {"python 3.11.* *_cpython", "python", "3.11.*"},
					{"python=3.11.2=h123_0", "python", "=3.11.2"}, {"scipy", "scipy", ""}},
				Pip: []string{"a", "b"}},
		},
		{
			name: "no dependencies",
			yaml: "name: empty\ndependencies:\nprefix: /opt/env\nvariables: {A: b}\n",
			want: &condaFile{Name: "empty"},
		},
		{
			name: "unknown section",
			yaml: "name: x\ndependancies: [numpy]\n",
			want: &condaFile{Name: "x", Warnings: []string{`conda_file env.yml: line 2: ignoring section "dependancies" (conda's sections are name, channels, dependencies, prefix, variables)`}},
		},
		{name: "empty", yaml: "", err: "conda_file env.yml: the file is empty"},
		{name: "not yaml", yaml: "dependencies: [python\n", err: "conda_file env.yml: not valid YAML: line 1: did not find expected ',' or ']'"},
		{name: "a list", yaml: "- python\n", err: "conda_file env.yml: line 1: the file must be a mapping with name, channels and dependencies, not a list"},
		{name: "dependencies a mapping", yaml: "dependencies:\n  python: 3.11\n", err: "conda_file env.yml: line 2: dependencies must be a list, not a mapping"},
		{name: "other mapping", yaml: "dependencies:\n  - python\n  - conda: [numpy]\n", err: `conda_file env.yml: line 3: dependencies item 2 is a mapping with key "conda"; only pip: may be a mapping there`},
		{name: "pip not a list", yaml: "dependencies:\n  - pip: requests\n", err: `conda_file env.yml: line 2: pip: must be a list of requirements: got "requests"`},
		{name: "pip item not a string", yaml: "dependencies:\n  - pip:\n    - {a: b}\n", err: `conda_file env.yml: line 3: pip: must be a list of requirements: item 1 is a mapping, not a string`},
		{name: "nested list", yaml: "dependencies:\n  - [python]\n", err: "conda_file env.yml: line 2: dependencies item 1 must be a package like numpy>=1.2 or a pip: list, not a list"},
		{name: "no package name", yaml: "dependencies:\n  - '>=3.9'\n", err: `conda_file env.yml: line 2: dependencies item 1: ">=3.9" does not start with a package name`},
		{name: "name not a string", yaml: "name: [a]\n", err: "conda_file env.yml: line 1: name must be a string, not a list"},
		{name: "channels", yaml: "channels: conda-forge\n", err: `conda_file env.yml: line 1: channels must be a list of channel names: got "conda-forge"`},
	} {
		got, err := parseCondaFile("env.yml", []byte(tc.yaml))
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s: got %+v, %v; want error %q", tc.name, got, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestPythonConstraint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		constraint string
		yes, no    []string
		pin        string
	}{
		{"", []string{"2.7.18", "3.11.2"}, nil, ""},
		{"=3.11", []string{"3.11.0", "3.11.7"}, []string{"3.1.11", "3.12.0", "2.7.18"}, "3.11"},
		{"3.11", []string{"3.11.2"}, []string{"3.10.2"}, "3.11"},
		{"==3.11.*", []string{"3.11.2"}, []string{"3.12.0"}, "3.11"},
		{"=3.11.*", []string{"3.11.2"}, []string{"3.12.0"}, "3.11"},
		{"==3.11", []string{"3.11.0"}, []string{"3.11.2"}, "3.11"},
		{"=3.11.2", []string{"3.11.2"}, []string{"3.11.20", "3.11.7"}, "3.11"},
		{">=3.9", []string{"3.9.0", "3.13.0"}, []string{"3.8.18", "2.7.18"}, ""},
		{">=3.9,<3.12", []string{"3.11.7"}, []string{"3.12.1", "3.8.1"}, ""},
		{"<=3.9", []string{"3.9.0"}, []string{"3.9.1"}, ""},
		{">3.9", []string{"3.9.1"}, []string{"3.9.0"}, ""},
		{"!=3.11.*", []string{"3.12.0"}, []string{"3.11.4"}, ""},
		{"!=3.11.2", []string{"3.11.4"}, []string{"3.11.2"}, ""},
		{"3.10|3.11", []string{"3.10.1", "3.11.1"}, []string{"3.12.0"}, ""},
		{"~=3.9", []string{"3.9.0", "3.12.1"}, []string{"3.8.1", "4.0.0"}, ""},
		{"=3", []string{"3.6.15"}, []string{"2.7.18"}, ""},
	} {
		c, err := parseConstraint(tc.constraint)
		if err != nil {
			t.Errorf("%q: %v", tc.constraint, err)
			continue
		}
		for _, v := range tc.yes {
			if pv, _ := parseVersion(v); !c.match(pv) {
				t.Errorf("%q does not match %s", tc.constraint, v)
			}
		}
		for _, v := range tc.no {
			if pv, _ := parseVersion(v); c.match(pv) {
				t.Errorf("%q matches %s", tc.constraint, v)
			}
		}
		if got := c.pinnedMinor(); got != tc.pin {
			t.Errorf("%q pins %q, want %q", tc.constraint, got, tc.pin)
		}
	}
	for _, bad := range []string{"abc", ">=", "3.x", "~=3", "3.11,"} {
		if _, err := parseConstraint(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// pathWithoutConda is this process's PATH less the folders holding a
// conda, mamba or micromamba (these machines have none; another might).
func pathWithoutConda() string {
	var keep []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if findCondaTool(dir) == "" {
			keep = append(keep, dir)
		}
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}

func condaSpec(context string) *Spec {
	return &Spec{Kind: KindConda, CondaFile: "env.yml", Context: context}
}

// TestCondaFileAsVirtualenv builds a pip-only conda file on a node without
// conda: it becomes a virtualenv of the python asked for.
func TestCondaFileAsVirtualenv(t *testing.T) {
	offlinePip(t)
	t.Setenv("PATH", pathWithoutConda())
	tmpl, err := os.ReadFile("testdata/pip-only.yml")
	if err != nil {
		t.Fatal(err)
	}
	// The version of the node's python3, so that it is found: 3.11 here.
	minor := versionString(hostPython(t).Version[:2])
	env := strings.ReplaceAll(string(tmpl), "PYTHON_VERSION", minor)
	c := &Cache{Dir: t.TempDir()}
	s := condaSpec("snap-pip-only")
	rt, log := prepare(t, c, s, &fetcher{files: map[string]string{"env.yml": env}})

	prefix := filepath.Join(c.Dir, s.Hash(), "env")
	want := &Runtime{Hash: s.Hash(), Prefix: prefix, PathPrepend: []string{filepath.Join(prefix, "bin")}, Vars: []string{"VIRTUAL_ENV=" + prefix}}
	if diff := cmp.Diff(want, rt, cmpRuntime); diff != "" {
		t.Errorf("runtime (-want +got):\n%s", diff)
	}
	if !strings.Contains(log, "so it becomes a virtualenv") {
		t.Errorf("log does not say the conda file became a virtualenv:\n%s", log)
	}
	if got := inEnv(t, rt, `python -c 'import ferrytestpkg, sys; print(ferrytestpkg.VALUE, "%d.%d" % sys.version_info[:2])'`); got != "42 "+minor {
		t.Errorf("python in the environment printed %q, want 42 %s", got, minor)
	}
	rec, err := readRecord(c.path(s.Hash()))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Kind != KindConda || rec.Builder != builderVenv {
		t.Errorf("record = %+v", rec)
	}
	rt.Release()
	if again, _ := prepare(t, c, s, &fetcher{}); !again.Reused || again.Vars[0] != "VIRTUAL_ENV="+prefix {
		t.Errorf("reuse: %+v", again)
	}
}

// TestCondaFileWithoutConda: what a node without conda refuses, and how
// it says so. None of these get as far as building anything.
func TestCondaFileWithoutConda(t *testing.T) {
	t.Setenv("PATH", pathWithoutConda())
	numpy, err := os.ReadFile("testdata/numpy.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, yaml, err string }{
		{"conda packages", string(numpy),
			"conda_file env.yml needs conda for numpy, scipy, but this node has no conda, mamba or micromamba; install one, or move them under pip:"},
		{"old python", "dependencies: [python=2.7, pip]\n",
			"conda_file env.yml asks for python=2.7, but no python on this node's PATH matches; found "},
		{"two constraints", "dependencies: ['python>=3', 'python<3.1']\n",
			"conda_file env.yml asks for python>=3,<3.1, but no python on this node's PATH matches; found "},
		{"bad version", "dependencies: [python=3.x]\n",
			`conda_file env.yml: python version "=3.x": "x" is not a number`},
		{"malformed", "dependencies: {python: 3}\n",
			"conda_file env.yml: line 1: dependencies must be a list, not a mapping"},
	} {
		c := &Cache{Dir: t.TempDir()}
		var log bytes.Buffer
		_, err := c.Prepare(context.Background(), condaSpec(tc.name), (&fetcher{files: map[string]string{"env.yml": tc.yaml}}).fetch, &log)
		if err == nil || !strings.HasPrefix(err.Error(), tc.err) || !errors.Is(err, ErrBuild) {
			t.Errorf("%s: %v; want %q… wrapping ErrBuild", tc.name, err, tc.err)
		}
		if strings.Contains(log.String(), "$ ") {
			t.Errorf("%s: ran a tool:\n%s", tc.name, log.String())
		}
		if _, err := os.Stat(c.path(condaSpec(tc.name).Hash())); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: a failed build left its folder: %v", tc.name, err)
		}
	}
}

// TestCondaTools checks which conda the cache picks and how it calls it.
// Real conda, mamba and micromamba cannot be installed on the test
// machines, so a script stands in for each, recording its arguments and
// making the prefix.
func TestCondaTools(t *testing.T) {
	for _, tc := range []struct {
		have []string
		want string
	}{
		{[]string{"conda"}, "conda"},
		{[]string{"conda", "mamba"}, "mamba"},
		{[]string{"conda", "mamba", "micromamba"}, "micromamba"},
	} {
		tools := t.TempDir()
		for _, name := range tc.have {
			copyFile(t, "testdata/fake-conda", filepath.Join(tools, name))
		}
		t.Setenv("PATH", tools+string(filepath.ListSeparator)+pathWithoutConda())
		c := &Cache{Dir: t.TempDir()}
		s := condaSpec("snap-numpy")
		rt, log := prepare(t, c, s, &fetcher{files: map[string]string{"env.yml": "dependencies: [numpy, python=2.7]\n"}})

		prefix := filepath.Join(c.Dir, s.Hash(), "env")
		file := filepath.Join(c.Dir, s.Hash(), "context", "env.yml")
		args := []string{"env", "create", "-p", prefix, "-f", file}
		if tc.want == "micromamba" {
			args = []string{"create", "-y", "-p", prefix, "-f", file}
		}
		b, err := os.ReadFile(filepath.Join(tools, "args"))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(append([]string{tc.want}, args...), strings.Fields(string(b))); diff != "" {
			t.Errorf("with %v: command line (-want +got):\n%s", tc.have, diff)
		}
		if !strings.Contains(log, "fake conda: done") {
			t.Errorf("the tool's output is not in the log:\n%s", log)
		}
		want := &Runtime{Hash: s.Hash(), Prefix: prefix, PathPrepend: []string{filepath.Join(prefix, "bin")}, Vars: []string{"CONDA_PREFIX=" + prefix}}
		if diff := cmp.Diff(want, rt, cmpRuntime); diff != "" {
			t.Errorf("with %v: runtime (-want +got):\n%s", tc.have, diff)
		}
		rec, err := readRecord(c.path(s.Hash()))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(&record{Kind: KindConda, Builder: tc.want, Description: "conda env.yml"}, rec, cmpopts.IgnoreFields(record{}, "Size", "Created")); diff != "" {
			t.Errorf("with %v: record (-want +got):\n%s", tc.have, diff)
		}
	}
}

// The conda file Azure ML's examples use, on a node without conda and
// without the python it pins: the error says what would make it work.
func TestAzureCondaFileOnANodeWithoutItsPython(t *testing.T) {
	t.Setenv("PATH", "/usr/bin:/bin") // the system's pythons, not a developer's pyenv
	t.Setenv("PATH", pathWithoutConda())
	if _, err := exec.LookPath("python3.10"); err == nil {
		t.Skip("this machine has python3.10, which the file asks for")
	}
	file := "name: train\nchannels: [conda-forge]\ndependencies:\n  - python=3.10\n  - pip\n  - pip:\n    - numpy==1.26.4\n"
	c := &Cache{Dir: t.TempDir()}
	var log bytes.Buffer
	_, err := c.Prepare(context.Background(), condaSpec("azure"), (&fetcher{files: map[string]string{"env.yml": file}}).fetch, &log)
	if err == nil || !errors.Is(err, ErrBuild) {
		t.Fatalf("err = %v, want a build error", err)
	}
	for _, want := range []string{
		"conda_file env.yml asks for python=3.10, but no python on this node's PATH matches; found ",
		"install python3.10 on the node, pin the python it has, or put micromamba on the PATH of the account jobs run as",
		"Debian 12 has no package of it",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
