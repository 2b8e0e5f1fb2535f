package slurm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/ferry-ml/ferry/internal/compute"
)

// defaultMaxArraySize is Slurm's own default for MaxArraySize, used when
// scontrol does not say.
const defaultMaxArraySize = 1001

// maxSubmits bounds the sbatch commands LaunchBatch runs at once: a burst
// of many shapes must not start hundreds of processes on the submitting
// host (over SSH, sshHost bounds its sessions as well).
const maxSubmits = 8

// LaunchBatch implements compute.BatchLauncher. Launches that ask Slurm
// for the same resources (resourceOptions: partition, nodes, tasks per
// node, account, QOS, constraint, reservation, GPUs, time limit, nice)
// become one sbatch --array, whose task i runs the i-th of them exactly as
// its own batch job would, with the handle ARRAYID_i. A launch alike to no
// other goes through Launch. Groups larger than Slurm's MaxArraySize allows
// are cut into several arrays. A launch that cannot be submitted fails
// alone; a failed sbatch fails the launches it carried.
func (t *Target) LaunchBatch(ctx context.Context, ls []compute.Launch) []compute.Launched {
	res := make([]compute.Launched, len(ls))
	// Group by resources, in the order the launches came, after each
	// launch's own part of a script has been tried alone: what is wrong
	// with one attempt must not fail its siblings.
	var keys []string
	groups := map[string][]int{}
	for i, l := range ls {
		if err := t.checkAttempt(l); err != nil {
			res[i].Err = err
			continue
		}
		k := strings.Join(resourceOptions(t.c, l.Spec), "\n")
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], i)
	}
	// Slurm's MaxArraySize is asked for only when there is an array.
	var plan [][]int
	per, arrays := 0, false
	for _, k := range keys {
		g := groups[k]
		if len(g) > 1 && per == 0 {
			per = t.maxArraySize(ctx) - 1 // task indices run from 0 to MaxArraySize-1
		}
		for _, c := range chunks(g, per) {
			plan = append(plan, c)
			arrays = arrays || len(c) > 1
		}
	}
	var runner []string
	if arrays {
		var err error
		if runner, err = t.runnerCommand(ctx); err != nil {
			for _, c := range plan {
				for _, i := range c {
					res[i].Err = err
				}
			}
			return res
		}
	}

	var wg sync.WaitGroup
	sem := make(chan struct{}, maxSubmits)
	submit := func(f func()) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f()
		}()
	}
	for _, chunk := range plan {
		if len(chunk) == 1 {
			i := chunk[0]
			submit(func() { res[i].Handle, res[i].Err = t.Launch(ctx, ls[i]) })
			continue
		}
		submit(func() {
			var as []attempt
			for _, i := range chunk {
				as = append(as, attempt{launch: ls[i], dir: t.attemptDir(ls[i].Job, ls[i].Attempt)})
			}
			hs, err := t.launchArray(ctx, runner, as)
			for n, i := range chunk {
				if err != nil {
					res[i].Err = err
				} else {
					res[i].Handle = hs[n]
				}
			}
		})
	}
	wg.Wait()
	return res
}

// checkAttempt is checkLaunch and the attempt's own part of a script.
func (t *Target) checkAttempt(l compute.Launch) error {
	if err := checkLaunch(l); err != nil {
		return err
	}
	_, err := t.batch(nil, "").attemptPart(attempt{launch: l, dir: t.attemptDir(l.Job, l.Attempt)})
	return err
}

// launchArray submits attempts (two or more, alike in resources) as one
// array job and returns the tasks' handles, in order. The script is the
// array's, written once under work_dir/arrays; each task's folder is made
// as Launch makes it. The tokens are stdin's first lines, one a task,
// exported to sbatch as FERRY_RUN_TOKEN_<task>; the script's taskToken
// leaves each task its own.
func (t *Target) launchArray(ctx context.Context, runner []string, as []attempt) ([]compute.Handle, error) {
	var name [8]byte
	_, _ = rand.Read(name[:]) // never fails (crypto/rand)
	arrays := path.Join(t.c.WorkDir, "arrays")
	b := t.batch(runner, path.Join(arrays, hex.EncodeToString(name[:])+".sh"), as...)
	script, err := b.script()
	if err != nil {
		return nil, fmt.Errorf("slurm: sbatch of an array of %d attempts: %w", len(as), err)
	}
	var dirs, stdin strings.Builder
	dirList := make([]string, len(as))
	for i, a := range as {
		dirs.WriteString(" " + shellQuote(a.dir))
		stdin.WriteString(a.launch.RunToken + "\n")
		dirList[i] = a.dir
	}
	stdin.WriteString(script)
	cmd := "umask 077 && mkdir -p " + shellQuote(arrays) + dirs.String() +
		" && i=0 && while [ \"$i\" -lt " + strconv.Itoa(len(as)) + " ]; do" +
		" IFS= read -r \"FERRY_RUN_TOKEN_$i\" && export \"FERRY_RUN_TOKEN_$i\" && i=$((i + 1)) || exit 1; done" +
		" && cat > " + shellQuote(b.path) + " && id=$(sbatch --parsable " + shellQuote(b.path) + ") && " + recordHandles(dirList...)
	id, err := t.sbatch(ctx, cmd, []byte(stdin.String()))
	if err != nil {
		return nil, fmt.Errorf("slurm: sbatch of an array of %d attempts (%s attempt %d, ...): %w",
			len(as), as[0].launch.Job, as[0].launch.Attempt, err)
	}
	hs := make([]compute.Handle, len(as))
	for i, a := range as {
		hs[i] = compute.Handle(id + "_" + strconv.Itoa(i))
		t.log.Debug("slurm job submitted", "job", a.launch.Job, "attempt", a.launch.Attempt, "slurm_job", hs[i])
	}
	return hs, nil
}

// chunks cuts a group into arrays of at most per tasks, as even as they
// can be (1001 by 1000 is 500 and 501, not 1000 and a lone 1). With per
// under 2 every launch is its own.
func chunks(group []int, per int) [][]int {
	if per < 2 {
		per = 1
	}
	n := (len(group) + per - 1) / per
	var out [][]int
	for c := range n {
		out = append(out, group[c*len(group)/n:(c+1)*len(group)/n])
	}
	return out
}

// maxArraySizeRe finds MaxArraySize in `scontrol show config`.
var maxArraySizeRe = lazyRegexp(`(?m)^MaxArraySize\s*=\s*(\d+)`)

// maxArraySize is Slurm's MaxArraySize, read once with scontrol and
// kept: a cluster's is changed only with its slurm.conf. When scontrol
// fails it is Slurm's default, and read again next time.
func (t *Target) maxArraySize(ctx context.Context) int {
	t.arrayMu.Lock()
	defer t.arrayMu.Unlock()
	if t.maxArray > 0 {
		return t.maxArray
	}
	out, err := t.host.run(ctx, "scontrol show config", nil)
	if err != nil {
		t.log.Warn("slurm: scontrol show config failed; arrays of at most Slurm's default MaxArraySize", "default", defaultMaxArraySize, "err", err)
		return defaultMaxArraySize
	}
	t.maxArray = defaultMaxArraySize
	if m := maxArraySizeRe().FindSubmatch(out); m != nil {
		if n, err := strconv.Atoi(string(m[1])); err == nil {
			// 0 turns arrays off; kept as 1, so that it is not read again.
			t.maxArray = max(n, 1)
		}
	}
	return t.maxArray
}
