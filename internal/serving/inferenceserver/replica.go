package inferenceserver

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Replica describes one replica to start: what a deployment's YAML and
// its placement decide.
type Replica struct {
	// Python is the interpreter of the deployment's environment; empty
	// means "python3" from PATH.
	Python string
	// ServerDir is the folder Install returned.
	ServerDir string
	// CodeDir is the deployment's code_configuration.code, unpacked; the
	// replica runs in it. Empty runs in the caller's directory.
	CodeDir string
	// Script is code_configuration.scoring_script, relative to CodeDir
	// (or absolute).
	Script string
	// ModelDir is where the model's files are: AZUREML_MODEL_DIR.
	ModelDir string
	// Host and Port are where the replica listens; Port 0 lets it pick
	// (the status lines say which). Empty Host is 127.0.0.1.
	Host string
	Port int
	// UnixSocket, when set, is the path of a Unix socket the replica
	// listens on as well: a gateway on the same host reaches it there
	// (UnixURL) for less CPU per request than over loopback TCP.
	UnixSocket string
	// Workers is the number of worker processes; 0 leaves it to the
	// deployment's WORKER_COUNT environment variable, or 1.
	Workers int
	// MaxRequestBytes bounds a request body (413 beyond it); 0 is the
	// server's default of 100 MiB.
	MaxRequestBytes int64
	// Secret, when set, is what every request must carry in the
	// SecretHeader header (the gateway's and the probes'): the replica
	// answers 401 or 403 to any other, before its scoring script sees
	// it. Ferry's replicas always have one (the server makes one per
	// replica); without one the replica answers whoever reaches it.
	Secret string
	// Env is the deployment's environment_variables (NAME=value). They
	// come after Ferry's own, so a deployment may set WORKER_COUNT as it
	// does on Azure.
	Env []string
}

// Command is how to start a replica: an argv, the variables to add to
// the environment the launcher already gives processes (the environment's
// own PATH and so on), and the working directory.
type Command struct {
	Args []string
	Env  []string
	Dir  string
}

// Command checks r and builds its command line and environment.
func (r Replica) Command() (Command, error) {
	var errs []error
	if r.ServerDir == "" {
		errs = append(errs, errors.New("inference server folder is empty: call Install first"))
	}
	if strings.TrimSpace(r.Script) == "" {
		errs = append(errs, errors.New("code_configuration.scoring_script is required: name the scoring script, for example score.py"))
	}
	if r.Port < 0 || r.Port > 65535 {
		errs = append(errs, fmt.Errorf("port must be 0 to 65535 (got %d)", r.Port))
	}
	if r.Workers < 0 {
		errs = append(errs, fmt.Errorf("WORKER_COUNT must be at least 1 (got %d)", r.Workers))
	}
	if r.MaxRequestBytes < 0 {
		errs = append(errs, fmt.Errorf("the request body limit must be positive (got %d)", r.MaxRequestBytes))
	}
	workersFromEnv := false
	for _, kv := range r.Env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			errs = append(errs, fmt.Errorf("environment_variables: %q is not NAME=value", kv))
			continue
		}
		if name == "WORKER_COUNT" {
			workersFromEnv = true
			if n, err := strconv.Atoi(value); err != nil || n < 1 {
				errs = append(errs, fmt.Errorf("environment_variables: WORKER_COUNT must be a whole number ≥ 1 (got %q)", value))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Command{}, err
	}

	python := r.Python
	if python == "" {
		python = "python3"
	}
	host := r.Host
	if host == "" {
		host = "127.0.0.1"
	}
	script := r.Script
	if !filepath.IsAbs(script) && r.CodeDir != "" {
		script = filepath.Join(r.CodeDir, script)
	}
	// -u: the status lines and the script's prints reach the log as they
	// are written, not when a buffer fills.
	args := []string{python, "-u", filepath.Join(r.ServerDir, Program),
		"--script", script, "--host", host, "--port", strconv.Itoa(r.Port)}
	if r.UnixSocket != "" {
		args = append(args, "--unix", r.UnixSocket)
	}
	if r.MaxRequestBytes > 0 {
		args = append(args, "--max-body-bytes", strconv.FormatInt(r.MaxRequestBytes, 10))
	}
	if r.Secret != "" {
		args = append(args, RequireSecretFlag)
	}
	// Azure's variables, so that scripts reading them find them.
	env := []string{
		"AZUREML_MODEL_DIR=" + r.ModelDir,
		"AZUREML_ENTRY_SCRIPT=" + r.Script,
		"PYTHONUNBUFFERED=1",
	}
	if r.CodeDir != "" {
		env = append(env, "AML_APP_ROOT="+r.CodeDir)
	}
	if r.Workers > 0 {
		args = append(args, "--workers", strconv.Itoa(r.Workers))
	} else if !workersFromEnv {
		env = append(env, "WORKER_COUNT=1")
	}
	env = append(env, r.Env...)
	if r.Secret != "" {
		// Last, so that no environment_variables entry replaces it.
		env = append(env, SecretEnv+"="+r.Secret)
	}
	return Command{Args: args, Env: env, Dir: r.CodeDir}, nil
}

// SecretHeader is the request header that carries a replica's secret
// (Replica.Secret), and SecretEnv the variable the inference server reads
// it from; RequireSecretFlag makes the server refuse to start without it.
const (
	SecretHeader      = "X-Ferry-Replica-Secret"
	SecretEnv         = "FERRY_REPLICA_SECRET"
	RequireSecretFlag = "--require-secret"
)

// UnixURL is the base URL of a replica listening on the Unix socket at
// path, as the gateway dials it.
func UnixURL(path string) string {
	return "unix:" + path
}

// URL is the base URL of a replica listening on address (host:port, as
// the status lines give it).
func URL(address string) string {
	return "http://" + address
}
