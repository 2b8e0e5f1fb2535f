// Package batchdriver is the node side of a batch endpoint's job: Ferry's
// batch driver, a Python program (standard library only, so it runs in any
// environment a deployment names) that runs an Azure ML batch scoring
// script (init(), run(mini_batch)) over the files of the job's input,
// embedded in the binary; and Install, which writes it to a folder that
// the workspace stores as a snapshot and batch jobs take as an input.
//
// How it shares the work between nodes and workers, retries, counts
// failures and writes the output is in the program's own doc string
// (python/ferry_batch_driver.py) and docs/batch-endpoints.md.
package batchdriver

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// Program is the driver's file name inside an installed folder.
const Program = "ferry_batch_driver.py"

// MLflowScript is, in the same folder, the scoring script of an MLflow
// model deployed without one.
const MLflowScript = "ferry_mlflow_score.py"

var (
	//go:embed python/ferry_batch_driver.py
	source []byte
	//go:embed python/ferry_mlflow_score.py
	mlflowSource []byte
)

// Digest is the sha256 of the embedded files: the name of the folder
// Install writes them to.
func Digest() string {
	h := sha256.New()
	for _, f := range []struct {
		name string
		b    []byte
	}{{Program, source}, {MLflowScript, mlflowSource}} {
		fmt.Fprintf(h, "%s\x00%d\x00", f.name, len(f.b))
		h.Write(f.b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Install writes the embedded driver (and MLflowScript) under root, in a
// folder named by their digest, unless it is there already, and returns
// that folder. The files are written to a temporary folder renamed into place, so a folder under
// its final name is always whole.
func Install(root string) (string, error) {
	dir := filepath.Join(root, Digest())
	if _, err := os.Stat(filepath.Join(dir, Program)); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("batch driver folder %s: %w", root, err)
	}
	tmp, err := os.MkdirTemp(root, ".install-")
	if err != nil {
		return "", fmt.Errorf("batch driver folder %s: %w", root, err)
	}
	defer os.RemoveAll(tmp)
	for name, b := range map[string][]byte{Program: source, MLflowScript: mlflowSource} {
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			return "", fmt.Errorf("install batch driver: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, Program)); statErr == nil {
			return dir, nil
		}
		return "", fmt.Errorf("install batch driver in %s: %w", dir, err)
	}
	return dir, nil
}
