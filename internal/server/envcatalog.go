package server

import (
	"bytes"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/ferry-ml/ferry/internal/envcatalog"
)

// environmentCatalogFile is the server's catalog of curated environments:
// entries that extend the built-in catalog or, under an existing name
// (with or without Azure's AzureML- prefix), replace its entry.
//
//	environments:
//	  - name: AzureML-sklearn-1.0-ubuntu20.04-py38-cpu
//	    description: scikit-learn 1.0 from the lab's registry
//	    python: "3.8"
//	    frameworks: [scikit-learn 1.0]
//	    versions:
//	      - {version: "1", image: registry.lab/sklearn-1.0:1}
//	  - name: AzureML-sklearn-1.5
//	    repository: registry.lab/mirror/sklearn-1.5
type environmentCatalogFile struct {
	Environments []envcatalog.Entry `yaml:"environments"`
}

// loadEnvironmentCatalog returns the built-in catalog extended by the file
// at path.
func loadEnvironmentCatalog(path string) (*envcatalog.Catalog, error) {
	if path == "" {
		return envcatalog.Builtin(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--environment-catalog: %w", err)
	}
	var f environmentCatalogFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("--environment-catalog %s: %v (want `environments:` with a list of {name, description, python, frameworks, and versions: [{version, image}] or repository})", path, err)
	}
	c, err := envcatalog.Builtin().Extend(f.Environments)
	if err != nil {
		return nil, fmt.Errorf("--environment-catalog %s: %w", path, err)
	}
	return c, nil
}
