package inferenceserver

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestInstallOnce: the server goes to a folder named by its digest,
// packages' __init__.py files included; a second Install, even a
// concurrent one, finds it and writes nothing.
func TestInstallOnce(t *testing.T) {
	root := t.TempDir()
	var wg sync.WaitGroup
	dirs := make([]string, 4)
	errs := make([]error, 4)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs[i], errs[i] = Install(root)
		}()
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if dirs[i] != filepath.Join(root, Digest()) {
			t.Errorf("Install %d: %s, want %s", i, dirs[i], filepath.Join(root, Digest()))
		}
	}
	for _, f := range []string{Program, "ferry_worker.py", "shims/ferry_aml_shim.py", "shims/azureml/contrib/services/__init__.py",
		"shims/azureml/contrib/services/aml_request.py", "shims/azureml_inference_server_http/api/aml_response.py",
		"shims/inference_schema/__init__.py", "shims/inference_schema/parameter_types/numpy_parameter_type.py"} {
		if _, err := os.Stat(filepath.Join(dirs[0], f)); err != nil {
			t.Errorf("installed server lacks %s: %v", f, err)
		}
	}
	// Only the one folder: the temporary ones are gone.
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("root holds %d entries, want 1", len(entries))
	}
	// A marker in the folder survives a later Install: it is not rewritten.
	marker := filepath.Join(dirs[0], "marker")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("second Install rewrote the folder: %v", err)
	}
}

func TestCommand(t *testing.T) {
	r := Replica{ServerDir: "/srv/is", CodeDir: "/code", Script: "onlinescoring/score.py", ModelDir: "/models/m/1",
		Port: 5001, Env: []string{"WORKER_COUNT=3", "MY_FLAG=on"}}
	c, err := r.Command()
	if err != nil {
		t.Fatal(err)
	}
	want := Command{
		Args: []string{"python3", "-u", "/srv/is/inference_server.py", "--script", "/code/onlinescoring/score.py",
			"--host", "127.0.0.1", "--port", "5001"},
		Env: []string{"AZUREML_MODEL_DIR=/models/m/1", "AZUREML_ENTRY_SCRIPT=onlinescoring/score.py",
			"PYTHONUNBUFFERED=1", "AML_APP_ROOT=/code", "WORKER_COUNT=3", "MY_FLAG=on"},
		Dir: "/code",
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("command (-want +got):\n%s", diff)
	}

	r = Replica{ServerDir: "/srv/is", Script: "/abs/score.py", Python: "/env/bin/python", Workers: 2, MaxRequestBytes: 10}
	c, err = r.Command()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Args, " "); got != "/env/bin/python -u /srv/is/inference_server.py --script /abs/score.py --host 127.0.0.1 --port 0 --max-body-bytes 10 --workers 2" {
		t.Errorf("args: %s", got)
	}
}

// TestCommandErrorsNameTheField: each mistake is reported, naming what to
// fix.
func TestCommandErrorsNameTheField(t *testing.T) {
	_, err := Replica{Port: 70000, Workers: -1, Env: []string{"WORKER_COUNT=zero", "NOEQUALS"}}.Command()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"call Install first", "code_configuration.scoring_script is required",
		"port must be 0 to 65535 (got 70000)", "WORKER_COUNT must be at least 1 (got -1)",
		`WORKER_COUNT must be a whole number ≥ 1 (got "zero")`, `"NOEQUALS" is not NAME=value`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
