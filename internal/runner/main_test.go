package runner

import (
	"os"
	"testing"
)

// TestMain answers the shim's command, as the ferry binary does: host jobs
// are started by re-running the runner's own binary, which in these tests
// is the test binary. It also plays a runner for the tests that kill one.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case ShimCommand:
			os.Exit(ShimMain(os.Args[2:]))
		case OutputsCommand:
			os.Exit(OutputsMain(os.Stdin, os.Stdout))
		case GuardCommand:
			os.Exit(GuardMain(os.Args[2:], os.Stdin))
		case fakeContainerRunnerCommand:
			os.Exit(fakeContainerRunner(os.Args[2:]))
		case fakeRunnerCommand:
			os.Exit(fakeRunner(os.Args[2:]))
		}
	}
	os.Exit(m.Run())
}
