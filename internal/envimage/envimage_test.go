package envimage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/imagereg"
	"github.com/ferry-ml/ferry/internal/testutil"
)

// A Dockerfile environment is built on the real Docker engine and pushed
// to the real test registry once, by digest, however many launches ask
// for it at once; the engine's copy is removed after the push.
func TestEnvImageBuiltAndPushedOnce(t *testing.T) {
	tr := testutil.Registry(t)
	d := testutil.RequireDocker(t)
	testutil.RequireBaseImage(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := tr.Addr + "/ferry-unit-" + hex.EncodeToString(b)
	files := t.TempDir()
	if err := os.WriteFile(filepath.Join(files, "Dockerfile"), []byte("FROM "+testutil.BaseImage+"\nRUN echo "+prefix+" > /marker\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := &testutil.SyncBuffer{}
	newPusher := func(snapshot func(context.Context, string, string) error) *Pusher {
		t.Helper()
		reg, err := imagereg.New(prefix, tr.Username, tr.Password)
		if err != nil {
			t.Fatal(err)
		}
		p, err := New(Config{Registry: reg, Snapshot: snapshot, Log: slog.New(slog.NewTextHandler(log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tg := newPusher(func(_ context.Context, id, dest string) error {
		if id != "ctx1" {
			t.Errorf("snapshot %q asked for", id)
		}
		return os.CopyFS(dest, os.DirFS(files))
	})
	env := &environment.Spec{Kind: environment.KindBuild, DockerfilePath: "Dockerfile", Context: "ctx1"}
	auth := remote.WithAuth(&authn.Basic{Username: tr.Username, Password: tr.Password})
	t.Cleanup(func() {
		ref, err := name.NewTag(prefix + "/" + Repo + ":" + env.Hash())
		if err != nil {
			return
		}
		if desc, err := remote.Head(ref, auth); err == nil {
			if err := remote.Delete(ref.Digest(desc.Digest.String()), auth); err != nil {
				t.Errorf("delete the test's image: %v", err)
			}
		}
	})
	refs := make([]string, 3)
	var wg sync.WaitGroup
	for i := range refs {
		wg.Go(func() {
			var err error
			if refs[i], err = tg.EnvImage(context.Background(), env); err != nil {
				t.Errorf("envImage: %v", err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if !strings.HasPrefix(refs[0], prefix+"/ferry-env@sha256:") || refs[1] != refs[0] || refs[2] != refs[0] {
		t.Errorf("refs %v, want one by digest under %s", refs, prefix)
	}
	if n := strings.Count(log.String(), "pushed an environment's image"); n != 1 {
		t.Errorf("%d pushes for three callers, want 1:\n%s", n, log)
	}
	// The registry has it by the environment's hash, with that digest.
	tag, err := name.NewTag(prefix + "/" + Repo + ":" + env.Hash())
	if err != nil {
		t.Fatal(err)
	}
	if desc, err := remote.Head(tag, auth); err != nil || !strings.HasSuffix(refs[0], "@"+desc.Digest.String()) {
		t.Errorf("the registry's %s: %v %v", tag, desc, err)
	}
	if _, err := d.ImageInspect(context.Background(), environment.ImageTag(env.Hash())); err == nil {
		t.Errorf("the pushed image is still on the server's engine")
	}
	// A new Pusher (a restarted server) finds it and pushes nothing.
	if ref, err := newPusher(nil).EnvImage(context.Background(), env); err != nil || ref != refs[0] {
		t.Errorf("after a restart: %q %v, want %q", ref, err, refs[0])
	}
	if n := strings.Count(log.String(), "pushed an environment's image"); n != 1 {
		t.Errorf("%d pushes after a restart, want still 1", n)
	}
	if strings.Contains(log.String(), tr.Password) {
		t.Errorf("the log holds the registry password")
	}
}

// Pushers hands every user of one registry and login the same Pusher (so
// that a job and a deployment of one environment build it once), another
// for another login, and refuses an address that is not one.
func TestPushersOnePerRegistryAndLogin(t *testing.T) {
	ps := &Pushers{}
	a, err := ps.For("127.0.0.1:5000/ns", "u", "pw")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := ps.For("127.0.0.1:5000/ns", "u", "pw"); err != nil || b != a {
		t.Errorf("the same registry and login: %p %v, want %p", b, err, a)
	}
	for _, other := range [][3]string{{"127.0.0.1:5000/ns", "u", "other"}, {"127.0.0.1:5000/ns2", "u", "pw"}, {"127.0.0.1:5000/ns", "", ""}} {
		if b, err := ps.For(other[0], other[1], other[2]); err != nil || b == a {
			t.Errorf("%s as %q: %p %v, want a Pusher of its own", other[0], other[1], b, err)
		}
	}
	if _, err := ps.For("Not A Registry", "", ""); err == nil {
		t.Errorf("an address that is not one: no error")
	}
}
