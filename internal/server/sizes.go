package server

import (
	"bytes"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/ferry-ml/ferry/internal/sizes"
)

// sizesFile is the server's sizes file: sizes that extend the built-in
// catalog or, under an existing name, replace its entry.
//
//	sizes:
//	  - {name: Lab_A100_x2, vcpus: 32, memory_gib: 256, gpus: 2, gpu_type: A100, family: labA100Family, price_per_hour: 0}
type sizesFile struct {
	Sizes []sizes.Size `yaml:"sizes"`
}

// loadSizes returns the built-in catalog extended by the file at path.
func loadSizes(path string) (*sizes.Catalog, error) {
	if path == "" {
		return sizes.Builtin(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--sizes: %w", err)
	}
	var f sizesFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("--sizes %s: %v (want `sizes:` with a list of {name, vcpus, memory_gib, gpus, gpu_type, family, price_per_hour, restricted})", path, err)
	}
	c, err := sizes.Builtin().Extend(f.Sizes)
	if err != nil {
		return nil, fmt.Errorf("--sizes %s: %w", path, err)
	}
	return c, nil
}
