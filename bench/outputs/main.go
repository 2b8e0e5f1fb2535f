// Command outputs measures how fast Ferry uploads a tree of many tiny
// files (a job's outputs) beside tar, the peer that moves the same tree in
// one stream, measured in the same run on the same disk:
//
//	tar -cf - DIR | cat > /dev/null          (read and stream the tree)
//	tar -cf - DIR | tar -xf - -C OTHER       (read, stream and write it again)
//
// Ferry's figures cover the whole of it, from the walk to the server's
// reply, uploading to a server that writes every blob durably, two ways,
// each to a fresh server:
//
//	stream   what the runner does: snapshot.PlanOutputs walks the tree and
//	         decides what to send (reading no file), then
//	         client.UploadOutputs reads the files as one POST
//	         /v1/snapshots/stream carries them; the server hashes, packs
//	         and builds the manifest ("build" is the walk)
//	batched  snapshot.BuildOutputs walks and hashes the tree, then
//	         client.UploadData asks which blobs are missing, sends them in
//	         tar batches and sends the manifest (the way before)
//
//	go run ./bench/outputs [-n 100000] [-single 2000]
//
// -single also times the oldest way, one PUT per file, on that many files
// and extrapolates it to n. It prints figures and ratios; it asserts
// nothing.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/snapshot"
)

func main() {
	n := flag.Int("n", 100_000, "tiny files in the tree")
	single := flag.Int("single", 0, "also time one PUT per file on this many files (0: skip)")
	flag.Parse()
	if err := run(*n, *single); err != nil {
		fmt.Fprintln(os.Stderr, "outputs:", err)
		os.Exit(1)
	}
}

func run(n, single int) error {
	tmp, err := os.MkdirTemp("", "ferry-bench-outputs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "ferry")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/ferry").CombinedOutput(); err != nil {
		return fmt.Errorf("build ferry (run from the repository root): %v\n%s", err, out)
	}
	tree := filepath.Join(tmp, "tree")
	if err := makeTree(tree, n); err != nil {
		return err
	}
	fmt.Printf("outputs upload benchmark: %d tiny files (100 per folder), %d CPUs, %s\n\n", n, runtime.NumCPU(), tmp)

	tarCat, err := timeShell(fmt.Sprintf("tar -cf - -C %q . | cat > /dev/null", tree))
	if err != nil {
		return err
	}
	other := filepath.Join(tmp, "untarred")
	if err := os.MkdirAll(other, 0o755); err != nil {
		return err
	}
	tarTar, err := timeShell(fmt.Sprintf("tar -cf - -C %q . | tar -xf - -C %q", tree, other))
	if err != nil {
		return err
	}
	os.RemoveAll(other)

	ctx := context.Background()
	// Each way gets a server of its own, so that neither finds the other's
	// blobs stored.
	stream, streamBuilt, err := timeUpload(ctx, bin, tmp, "data-stream", tree, n, true)
	if err != nil {
		return err
	}
	batched, batchedBuilt, err := timeUpload(ctx, bin, tmp, "data-batched", tree, n, false)
	if err != nil {
		return err
	}

	fmt.Printf("%-40s %9.2fs\n", "tar -cf - | cat > /dev/null", tarCat.Seconds())
	fmt.Printf("%-40s %9.2fs\n", "tar -cf - | tar -xf -", tarTar.Seconds())
	fmt.Printf("%-40s %9.2fs  (walk %.2fs, read and upload %.2fs)\n", "ferry plan + upload (stream)", stream.Seconds(), streamBuilt.Seconds(), (stream - streamBuilt).Seconds())
	fmt.Printf("%-40s %9.2fs  (build and hash %.2fs, upload %.2fs)\n", "ferry build + upload (batched, before)", batched.Seconds(), batchedBuilt.Seconds(), (batched - batchedBuilt).Seconds())
	fmt.Printf("%-40s %9.2f  (aim: <= 2)\n", "ratio ferry stream / (tar | cat)", stream.Seconds()/tarCat.Seconds())
	fmt.Printf("%-40s %9.2f\n", "ratio ferry stream / (tar | tar -x)", stream.Seconds()/tarTar.Seconds())
	fmt.Printf("%-40s %9.2f\n", "ratio ferry batched / (tar | cat)", batched.Seconds()/tarCat.Seconds())

	if single > 0 {
		c, stop, err := startServer(bin, tmp, "data-single")
		if err != nil {
			return err
		}
		defer stop()
		one, err := timeSingle(ctx, c, tmp, min(single, n))
		if err != nil {
			return err
		}
		est := one * time.Duration(n) / time.Duration(min(single, n))
		fmt.Printf("%-40s %9.2fs for %d files, about %.0fs for %d\n", "one PUT per file (before batching)", one.Seconds(), min(single, n), est.Seconds(), n)
	}
	return nil
}

// timeUpload starts a server on a fresh data directory and times building
// the tree's snapshot as the runner does and uploading it, by the snapshot
// stream or by batches of blobs; it returns the whole time and the part
// spent building.
func timeUpload(ctx context.Context, bin, tmp, data, tree string, n int, stream bool) (total, built time.Duration, err error) {
	c, stop, err := startServer(bin, tmp, data)
	if err != nil {
		return 0, 0, err
	}
	defer stop()
	start := time.Now()
	if stream {
		// As the runner does: walk and plan, then read the files as the
		// one request sends them; the server hashes.
		plan, err := snapshot.PlanOutputs(tree, snapshot.OutputOptions{})
		if err != nil {
			return 0, 0, err
		}
		built = time.Since(start)
		id, sent, err := c.UploadOutputs(ctx, plan, nil)
		if err != nil {
			return 0, 0, err
		}
		total = time.Since(start)
		if sent.Files != n || len(sent.Skipped) != 0 {
			return 0, 0, fmt.Errorf("sent %d files (%d skipped), want %d", sent.Files, len(sent.Skipped), n)
		}
		// Check, untimed, that the server stored what the client's own
		// hashing makes of the tree.
		ob, err := snapshot.BuildOutputs(tree, snapshot.OutputOptions{})
		if err != nil {
			return 0, 0, err
		}
		if id != ob.Manifest.ID() {
			return 0, 0, fmt.Errorf("the server stored snapshot %s, want %s", id, ob.Manifest.ID())
		}
		return total, built, nil
	}
	ob, err := snapshot.BuildOutputs(tree, snapshot.OutputOptions{})
	if err != nil {
		return 0, 0, err
	}
	built = time.Since(start)
	id, stats, err := c.UploadData(ctx, ob.Manifest, ob.Files, ob.Data, nil)
	if err != nil {
		return 0, 0, err
	}
	total = time.Since(start)
	if stats.Uploaded != n {
		return 0, 0, fmt.Errorf("uploaded %d blobs, want %d", stats.Uploaded, n)
	}
	if id != ob.Manifest.ID() {
		return 0, 0, fmt.Errorf("the server stored snapshot %s, want %s", id, ob.Manifest.ID())
	}
	return total, built, nil
}

// makeTree writes n tiny files of distinct content, 100 to a folder.
func makeTree(dir string, n int) error {
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("d%04d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%06d.txt", i)), fmt.Appendf(nil, "step %d loss %g\n", i, 1/float64(i+1)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func timeShell(script string) (time.Duration, error) {
	start := time.Now()
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("%s: %v\n%s", script, err, out)
	}
	return time.Since(start), nil
}

// timeSingle uploads k fresh tiny files one PUT each, as client.Upload did
// before it batched.
func timeSingle(ctx context.Context, c *client.Client, tmp string, k int) (time.Duration, error) {
	dir := filepath.Join(tmp, "single")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	for i := range k {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("s%06d", i)), fmt.Appendf(nil, "single %d\n", i), 0o644); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	m, files, err := snapshot.Build(dir, snapshot.BuildOptions{})
	if err != nil {
		return 0, err
	}
	missing, err := c.Missing(ctx, m.Digests())
	if err != nil {
		return 0, err
	}
	for _, d := range missing {
		if err := c.PutBlob(ctx, d, files[d], nil); err != nil {
			return 0, err
		}
	}
	if _, err := c.CreateSnapshot(ctx, m); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func startServer(bin, tmp, data string) (*client.Client, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	dataDir := filepath.Join(tmp, data)
	srv := exec.Command(bin, "server", "--data-dir", dataDir, "--addr", addr)
	logf, err := os.Create(filepath.Join(tmp, data+".log"))
	if err != nil {
		return nil, nil, err
	}
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		return nil, nil, err
	}
	stop := func() { _ = srv.Process.Signal(os.Interrupt); _ = srv.Wait() }
	ctx := context.Background()
	for i := 0; ; i++ {
		tok, err := os.ReadFile(filepath.Join(dataDir, "owner.token"))
		if err == nil {
			c := client.New("http://"+addr, string(tok))
			if c.Health(ctx) == nil {
				return c, stop, nil
			}
		}
		if i > 400 {
			stop()
			return nil, nil, fmt.Errorf("server did not start; see %s", logf.Name())
		}
		time.Sleep(25 * time.Millisecond)
	}
}
