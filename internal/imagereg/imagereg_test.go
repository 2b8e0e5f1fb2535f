package imagereg

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ferry-ml/ferry/internal/testutil"
)

// staticBinary builds a tiny static Go program, as a stand-in for
// Ferry's binary.
func staticBinary(t *testing.T, cgo bool) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\nimport \"os/user\"\nfunc main() { _, _ = user.Current() }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module tiny\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "tiny")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	env := "CGO_ENABLED=0"
	if cgo {
		env = "CGO_ENABLED=1"
	}
	cmd.Env = append(os.Environ(), env, "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("cannot build a test binary (%s): %v\n%s", env, err, b)
	}
	return out
}

func TestRunnerImageNeedsAStaticBinary(t *testing.T) {
	if _, _, err := RunnerImage(staticBinary(t, true)); !errors.Is(err, ErrNotStatic) {
		if _, lerr := exec.LookPath("gcc"); lerr != nil {
			t.Skip("no C compiler: a CGO_ENABLED=1 build is static here")
		}
		t.Errorf("RunnerImage of a cgo binary: %v, want ErrNotStatic", err)
	}
	bin := staticBinary(t, false)
	img, tag, err := RunnerImage(bin)
	if err != nil {
		t.Fatal(err)
	}
	if tag2, err := RunnerTag(bin); err != nil || tag2 != tag {
		t.Errorf("RunnerTag = %q %v, RunnerImage's tag %q", tag2, err, tag)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(tag) != 64 || cf.OS != "linux" || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != RunnerPath {
		t.Errorf("tag %q, config %+v", tag, cf.Config)
	}
	if ls, _ := img.Layers(); len(ls) != 1 {
		t.Errorf("%d layers, want 1", len(ls))
	}
}

// A push to the real test registry: found by its tag afterwards with the
// digest Push returned; wrong credentials are refused naming
// registry_credentials, and the password is in no error.
func TestPushAndLookup(t *testing.T) {
	tr := testutil.Registry(t)
	ctx := context.Background()
	r, err := New(tr.Addr+"/ferry-test/imagereg", tr.Username, tr.Password)
	if err != nil {
		t.Fatal(err)
	}
	img, tag, err := RunnerImage(staticBinary(t, false))
	if err != nil {
		t.Fatal(err)
	}
	d, err := r.Push(ctx, img, RunnerRepo, tag)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ref, err := name.NewDigest(r.Ref(RunnerRepo, d))
		if err == nil {
			err = remote.Delete(ref, r.options(ctx)...)
		}
		if err != nil {
			t.Errorf("delete the test's image: %v", err)
		}
	})
	got, found, err := r.Lookup(ctx, RunnerRepo, tag)
	if err != nil || !found || got != d {
		t.Errorf("Lookup after Push = %q %v %v, want %q", got, found, err, d)
	}
	if _, found, err := r.Lookup(ctx, RunnerRepo, strings.Repeat("0", 64)); found || err != nil {
		t.Errorf("Lookup of a tag never pushed = %v %v", found, err)
	}
	bad, err := New(tr.Addr+"/ferry-test/imagereg", tr.Username, "wrong-password-123")
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.Push(ctx, img, RunnerRepo, tag)
	if err == nil || !strings.Contains(err.Error(), "registry_credentials") || strings.Contains(err.Error(), "wrong-password-123") {
		t.Errorf("push with a wrong password: %v", err)
	}
	down, err := New("127.0.0.1:1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := down.Lookup(ctx, RunnerRepo, tag); err == nil || !strings.Contains(err.Error(), "reaches 127.0.0.1:1") {
		t.Errorf("lookup at a closed port: %v", err)
	}
}
