package api

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/compute"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/store/sqlite"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// The model and data registries take the owner's token, as environments
// do: a run token (a job's) and no token are refused on every route, and
// a bad spec is answered with its field.
func TestModelRoutesAreForOwners(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := blob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(context.Background(), workspace.Config{
		Store: st, Blobs: blobs, LogDir: filepath.Join(dir, "logs"), APIURL: "http://unused",
		Targets: func(*spec.Compute) (compute.Target, error) { return noTarget{}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	owner, run := "fry_owner", "fry_run"
	for _, tok := range []store.Token{
		{Hash: auth.Hash(owner), Kind: auth.KindOwner, Subject: "owner", Created: time.Now()},
		{Hash: auth.Hash(run), Kind: auth.KindRun, Subject: "some-job", Attempt: 1, Created: time.Now()},
	} {
		if err := st.CreateToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(New(ws, Workloads{}, st, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)

	for _, r := range [][2]string{
		{"GET", "/v1/models"},
		{"POST", "/v1/models"},
		{"GET", "/v1/models/iris/versions/1"},
		{"POST", "/v1/models/iris/versions/1/archive"},
		{"POST", "/v1/models/iris/versions/1/restore"},
		{"GET", "/v1/data"},
		{"POST", "/v1/data"},
		{"GET", "/v1/data/cifar/versions/1"},
		{"POST", "/v1/data/cifar/versions/1/archive"},
		{"POST", "/v1/data/cifar/versions/1/restore"},
	} {
		if code := call(t, srv, r[0], r[1], run, strings.NewReader(`{}`), nil, nil); code != 403 {
			t.Errorf("%s %s with a run token: %d, want 403", r[0], r[1], code)
		}
		if code := call(t, srv, r[0], r[1], "", strings.NewReader(`{}`), nil, nil); code != 401 {
			t.Errorf("%s %s with no token: %d, want 401", r[0], r[1], code)
		}
	}
	var p apitypes.Problem
	body := []byte(`{"spec": {"name": "iris", "path": "m", "type": "onnx"}, "snapshot": ""}`)
	if code := call(t, srv, "POST", "/v1/models", owner, bytes.NewReader(body), nil, &p); code != 400 || len(p.Errors) != 1 || p.Errors[0].Field != "type" {
		t.Errorf("a bad type: %d %+v; want 400 naming the field type", code, p)
	}
	body = []byte(`{"spec": {"name": "cifar", "path": "d", "type": "mltable"}, "snapshot": ""}`)
	if code := call(t, srv, "POST", "/v1/data", owner, bytes.NewReader(body), nil, &p); code != 400 || len(p.Errors) != 1 || p.Errors[0].Field != "type" {
		t.Errorf("a data asset of a bad type: %d %+v; want 400 naming the field type", code, p)
	}
	var list []apitypes.Model
	if code := call(t, srv, "GET", "/v1/models?include_archived=true", owner, nil, nil, &list); code != 200 || len(list) != 0 {
		t.Errorf("owner lists: %d %v", code, list)
	}
	if code := call(t, srv, "GET", "/v1/models?include_archived=maybe", owner, nil, nil, &p); code != 400 || !strings.Contains(p.Detail, "include_archived") {
		t.Errorf("include_archived=maybe: %d %+v", code, p)
	}
}
