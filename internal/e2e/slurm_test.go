package e2e

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// Ferry on the real test cluster (scripts/slurm-setup.sh): every job here
// goes through a real `ferry server`, sbatch and slurmd.

// startSlurm starts a server that reaches the test cluster (SLURM_CONF in
// its environment) and attaches a slurm compute named name on partition,
// submitting on this host. Its work_dir is a fresh folder, which every
// node sees: the nodes' slurmd run on this host.
func startSlurm(t *testing.T, sl testutil.Slurm, name, partition string) *server {
	t.Helper()
	s := startServerEnv(t, sl.Env, "--cancel-grace", "1s")
	s.mustFerry("compute", "attach", "-f", slurmFile(t, name, partition, filepath.Join(passableDir(t), "slurm")))
	return s
}

func slurmFile(t *testing.T, name, partition, workDir string) string {
	t.Helper()
	return computeFile(t, fmt.Sprintf("name: %s\ntype: slurm\npartition: %s\nwork_dir: %s\n", name, partition, workDir))
}
