package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/internal/selfexe"
)

// copySelfCmd is what the init container of a Kubernetes pod runs: the
// runner's image holds nothing but Ferry's static binary (no shell, no
// cp), which copies itself into the volume the job's container runs the
// runner from.
func (a *app) copySelfCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "copy-self DEST",
		Short:  "Copy this ferry binary to DEST (the init container of a Kubernetes pod)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			return copyExecutable(exe, args[0])
		},
	}
}

// copyExecutable copies the file src to dest, executable, never leaving
// dest half written.
func copyExecutable(src, dest string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := selfexe.WriteExecutable(in, dest); err != nil {
		return fmt.Errorf("copy-self: %w", err)
	}
	return nil
}
