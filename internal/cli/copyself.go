package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
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

// copyExecutable copies the file src to dest, executable, through a
// temporary file beside dest so that dest is never half written.
func copyExecutable(src, dest string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".copy-self-*")
	if err != nil {
		return fmt.Errorf("copy-self: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return fmt.Errorf("copy-self: %w", err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
}
