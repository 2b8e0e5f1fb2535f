package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestSizeCatalog(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sizes.yml")
	writeFiles(t, dir, map[string]string{"sizes.yml": `sizes:
  - {name: Lab_A100_x2, vcpus: 32, memory_gib: 256, gpus: 2, gpu_type: A100, family: labA100Family}
  - {name: Standard_DS3_v2, vcpus: 4, memory_gib: 16, family: standardDSv2Family, price_per_hour: 0.5}
`})
	s := startServer(t, "--sizes", file)
	var list []struct {
		Name      string  `json:"name"`
		VCPUs     int     `json:"vcpus"`
		MemoryGiB float64 `json:"memory_gib"`
		GPUs      int     `json:"gpus"`
		Family    string  `json:"family"`
	}
	if err := json.Unmarshal([]byte(s.mustFerry("size", "list", "-o", "json").stdout), &list); err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	for i, sz := range list {
		byName[sz.Name] = i
	}
	for _, want := range []string{"Standard_DS3_v2", "Standard_NC6s_v3", "Standard_D4s_v3", "Lab_A100_x2"} {
		if _, ok := byName[want]; !ok {
			t.Errorf("size list lacks %s", want)
		}
	}
	if sz := list[byName["Standard_DS3_v2"]]; sz.VCPUs != 4 || sz.MemoryGiB != 16 {
		t.Errorf("the sizes file did not override Standard_DS3_v2: %+v", sz)
	}
	if sz := list[byName["Lab_A100_x2"]]; sz.GPUs != 2 || sz.Family != "labA100Family" {
		t.Errorf("custom size: %+v", sz)
	}
	mustContain(t, "table", s.mustFerry("size", "list").stdout, "NAME", "VCPUS", "Lab_A100_x2", "A100")

	// A bad sizes file stops the server with a message naming the field.
	bad := filepath.Join(dir, "bad.yml")
	if err := os.WriteFile(bad, []byte("sizes:\n  - {name: x, vcpus: 0, memory_gib: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ferryBin, "server", "--data-dir", t.TempDir(), "--addr", freeAddr(t), "--sizes", bad).CombinedOutput()
	if err == nil {
		t.Fatalf("a server with a bad sizes file started:\n%s", out)
	}
	mustContain(t, "bad sizes file", string(out), "--sizes", "vcpus")
}
