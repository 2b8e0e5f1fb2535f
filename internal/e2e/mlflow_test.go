package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// A job in an image environment logs with mlflow as on the host: the
// stand-in and the runner's endpoint reach into the container (the
// attempt's folder is mounted at the same path; the network is the
// host's), and job show has the metrics and params.
func TestMLflowInImageEnvironment(t *testing.T) {
	testutil.RequireBaseImage(t)
	s := startServer(t)
	file := jobFile(t, `code: .
command: python3 train.py
environment:
  image: `+testutil.BaseImage+`
`, map[string]string{"train.py": `import mlflow
mlflow.start_run()
mlflow.log_param("where", "container")
mlflow.log_metric("loss", 0.5, step=1)
mlflow.log_artifact("train.py")
mlflow.end_run()
print("logged from the container")
`})
	r := s.mustFerry("job", "create", "-f", file, "--stream", "--name", "mlflow-img")
	mustContain(t, "the container's log", r.stdout, "logged from the container")
	show := s.mustFerry("job", "show", "mlflow-img")
	mustContain(t, "job show", show.stdout, "metric loss:", "0.5", "param where:", "container")
	dl := t.TempDir()
	s.mustFerry("job", "download", "mlflow-img", "--download-path", dl)
	if _, err := os.Stat(filepath.Join(dl, "artifacts", "outputs", "train.py")); err != nil {
		t.Errorf("mlflow.log_artifact in the container: %v", err)
	}
}
