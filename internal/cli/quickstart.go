package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/ferry-ml/ferry/examples"
)

func (a *app) quickstartCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "quickstart",
		Short: "Run the example training job on the local workspace and show its logs, metrics and outputs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := a.connect(ctx)
			if err != nil {
				return err
			}
			home, err := a.home()
			if err != nil {
				return err
			}
			dir := filepath.Join(home, "examples")
			if err := writeExamples(dir); err != nil {
				return err
			}
			file := filepath.Join(dir, "quickstart", "job.yml")
			fmt.Fprintf(a.stderr, "submitting %s to %s\n", file, c.BaseURL())
			j, err := a.createJob(ctx, c, createOpts{file: file})
			if err != nil {
				return err
			}
			streamErr := a.streamToEnd(ctx, c, j.Name)
			var ee *exitError
			if errors.As(streamErr, &ee) && ee.code == 130 {
				return streamErr
			}
			out := filepath.Join(home, "downloads", j.Name)
			where, err := download(ctx, c, j.Name, out, "")
			if err != nil {
				return err
			}
			for _, w := range where {
				fmt.Fprintf(a.stderr, "outputs: %s\n", w)
			}
			a.quickstartNext(ctx, home, j.Name, file)
			return streamErr
		},
	}
}

// writeExamples copies the embedded examples into dir, replacing old copies.
func writeExamples(dir string) error {
	return fs.WalkDir(examples.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if filepath.Ext(p) == ".go" {
			return nil
		}
		data, err := examples.FS.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

// quickstartNext says what to try next, and that the local workspace's
// server goes on in the background, with commands that work as they are
// written: through `go run` when this ferry is a `go run` build.
func (a *app) quickstartNext(ctx context.Context, home, job, file string) {
	fmt.Fprintf(a.stderr, "\nnext: `%s job show %s`, or edit %s and run `%s job create -f %s --stream`\n", a.self, job, file, a.self, file)
	if a.getenv("FERRY_URL") == "" {
		if st := localServerState(ctx, home); st.Running {
			fmt.Fprintf(a.stderr, "the local workspace server goes on running in the background (pid %d, %s, log %s); `%s server stop` stops it, `%s server status` shows it\n",
				st.PID, st.URL, st.Log, a.self, a.self)
		}
	}
	if h := a.buildHint(); h != "" {
		fmt.Fprintln(a.stderr, h)
	}
}
