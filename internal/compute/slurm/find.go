package slurm

import (
	"context"
	"path"
	"strconv"
	"strings"

	"github.com/ferry-ml/ferry/internal/compute"
)

// handleFile is the file, in an attempt's folder, where the submit command
// writes the Slurm job id sbatch printed, before it prints it to the
// server: a server killed while sbatch ran finds the handle there
// (FindHandles). On this host the submit command outlives a killed
// server; over SSH it may not, and then nothing is found and the attempt
// is launched again as a new one.
const handleFile = "handle"

// findBatch bounds the files of one grep command line.
const findBatch = 200

// FindHandles implements compute.Finder: one grep over the attempts'
// handle files prints "path:handle" for each that exists.
func (t *Target) FindHandles(ctx context.Context, as []compute.Attempt) (map[compute.Attempt]compute.Handle, error) {
	byPath := map[string]compute.Attempt{}
	var paths []string
	for _, a := range as {
		if !jobNameRe().MatchString(a.Job) {
			continue
		}
		p := path.Join(t.attemptDir(a.Job, a.Attempt), handleFile)
		byPath[p] = a
		paths = append(paths, p)
	}
	res := map[compute.Attempt]compute.Handle{}
	for start := 0; start < len(paths); start += findBatch {
		chunk := paths[start:min(start+findBatch, len(paths))]
		quoted := make([]string, len(chunk))
		for i, p := range chunk {
			quoted[i] = shellQuote(p)
		}
		// -s: say nothing of missing files (grep still exits 2 for them,
		// so its status is not the answer; a login node that cannot be
		// reached is still an error).
		out, err := t.host.run(ctx, "grep -sH . "+strings.Join(quoted, " ")+"; exit 0", nil)
		if err != nil {
			return nil, err
		}
		for line := range strings.SplitSeq(string(out), "\n") {
			p, h, ok := strings.Cut(line, ":")
			a, known := byPath[p]
			if ok && known && handleRe().MatchString(h) {
				res[a] = compute.Handle(h)
			}
		}
	}
	return res, nil
}

// recordHandles is the shell, run after id=$(sbatch --parsable ...),
// that writes the handle of each attempt submitted to its folder's
// handle file, then prints the job id as sbatch did. $id is sbatch's "id"
// or "id;cluster"; one folder is a plain job's (handle: the id), several
// an array's, in task order (handles: id_0, id_1, ...).
func recordHandles(dirs ...string) string {
	var s strings.Builder
	s.WriteString("id=${id%%;*}")
	for i, d := range dirs {
		h := `"$id"`
		if len(dirs) > 1 {
			h = `"${id}_` + strconv.Itoa(i) + `"`
		}
		s.WriteString(" && printf '%s\\n' " + h + " > " + shellQuote(path.Join(d, handleFile)))
	}
	s.WriteString(" && printf '%s\\n' \"$id\"")
	return s.String()
}
