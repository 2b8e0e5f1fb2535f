package cli

import (
	"fmt"
	"runtime"

	"github.com/ferry-ml/ferry/internal/buildinfo"
	"github.com/spf13/cobra"
)

// version says which ferry this is: the module version Go recorded (a
// tag, or "(devel)" for a build from a checkout), the commit it was built
// from and whether the tree had changes, and the Go that built it.
func version() string {
	info := buildinfo.Read()
	if !info.Known {
		return "unknown (built without module information) " + runtime.Version()
	}
	v := info.Module
	if info.Revision != "" {
		v += " commit " + info.ShortRevision()
		if info.Modified {
			v += "+changes"
		}
	}
	return v + " " + info.Go
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print which ferry this is (also: ferry --version)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(a.stdout, "ferry", version())
			return err
		},
	}
}
