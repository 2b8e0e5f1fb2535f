package assets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

// DefaultDatastore is Azure's default datastore's name. Until a datastore
// of that name is created, it is a local_folder datastore in the server's
// work directory (Config.DefaultDatastoreDir), which the jobs of this
// host (the local target, process nodes) can read.
const DefaultDatastore = "workspaceblobstore"

func datastoreView(rec store.Datastore) (*apitypes.Datastore, error) {
	var f spec.DatastoreFile
	if err := json.Unmarshal(rec.Spec, &f); err != nil {
		return nil, fmt.Errorf("datastore %s: stored spec: %w", rec.Name, err)
	}
	return &apitypes.Datastore{Name: rec.Name, Type: rec.Type, Spec: &f, Created: timePtr(rec.Created), Updated: timePtr(rec.Updated)}, nil
}

// builtinDatastore is workspaceblobstore before one is created, or nil
// when the server has no folder for it.
func (a *Assets) builtinDatastore() *apitypes.Datastore {
	if a.defaultDatastoreDir == "" {
		return nil
	}
	return &apitypes.Datastore{Name: DefaultDatastore, Type: "local_folder", BuiltIn: true, Spec: &spec.DatastoreFile{
		Name: DefaultDatastore, Type: "local_folder", Path: a.defaultDatastoreDir,
		Description: "Ferry's default datastore: a folder in the server's work directory, readable by the jobs of its host; create a datastore named workspaceblobstore to point it elsewhere",
	}}
}

// CreateDatastore stores a datastore, or replaces the one of that name
// (as `az ml datastore create` updates). Its credentials are not kept.
func (a *Assets) CreateDatastore(ctx context.Context, who auth.Principal, f *spec.DatastoreFile) (*apitypes.Datastore, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot create datastores")
	}
	if f == nil {
		return nil, apperr.Invalid("the datastore is missing")
	}
	if err := f.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	dropped := f.CredentialNames()
	kept := *f
	kept.Credentials = nil
	raw, err := json.Marshal(&kept)
	if err != nil {
		return nil, err
	}
	now := a.now()
	if err := a.st.PutDatastore(ctx, store.Datastore{Name: f.Name, Type: f.Type, Spec: raw, Created: now, Updated: now}); err != nil {
		return nil, apperr.NoSpace(err, "datastore "+f.Name)
	}
	rec, err := a.st.GetDatastore(ctx, f.Name)
	if err != nil {
		return nil, err
	}
	v, err := datastoreView(rec)
	if err != nil {
		return nil, err
	}
	v.CredentialsNotKept = dropped
	return v, nil
}

// GetDatastore returns a datastore by name.
func (a *Assets) GetDatastore(ctx context.Context, name string) (*apitypes.Datastore, error) {
	rec, err := a.st.GetDatastore(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		if name == DefaultDatastore {
			if b := a.builtinDatastore(); b != nil {
				return b, nil
			}
		}
		names, _ := a.datastoreNames(ctx)
		return nil, apperr.NotFound("datastore %s is not known to this workspace; %s", name, knownDatastores(names))
	}
	if err != nil {
		return nil, err
	}
	return datastoreView(rec)
}

// ListDatastores returns every datastore by name, the built-in
// workspaceblobstore among them while none of that name was created.
func (a *Assets) ListDatastores(ctx context.Context) ([]*apitypes.Datastore, error) {
	recs, err := a.st.ListDatastores(ctx)
	if err != nil {
		return nil, err
	}
	out := []*apitypes.Datastore{}
	builtin := a.builtinDatastore()
	for _, r := range recs {
		v, err := datastoreView(r)
		if err != nil {
			return nil, err
		}
		if r.Name == DefaultDatastore {
			builtin = nil
		}
		out = append(out, v)
	}
	if builtin != nil {
		out = append(out, builtin)
		slices.SortFunc(out, func(a, b *apitypes.Datastore) int { return strings.Compare(a.Name, b.Name) })
	}
	return out, nil
}

// DeleteDatastore removes a datastore. Jobs submitted before keep where
// their inputs were resolved to; new ones naming it are refused.
func (a *Assets) DeleteDatastore(ctx context.Context, who auth.Principal, name string) error {
	if !who.IsOwner() {
		return apperr.Forbidden("a run token cannot delete datastores")
	}
	err := a.st.DeleteDatastore(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		if name == DefaultDatastore && a.builtinDatastore() != nil {
			return apperr.Invalid("workspaceblobstore is the built-in default datastore and cannot be deleted; create one of that name to point it elsewhere")
		}
		names, _ := a.datastoreNames(ctx)
		return apperr.NotFound("datastore %s is not known to this workspace; %s", name, knownDatastores(names))
	}
	return err
}

func (a *Assets) datastoreNames(ctx context.Context) ([]string, error) {
	recs, err := a.st.ListDatastores(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, r := range recs {
		names = append(names, r.Name)
	}
	if a.builtinDatastore() != nil && !slices.Contains(names, DefaultDatastore) {
		names = append(names, DefaultDatastore)
		slices.Sort(names)
	}
	return names, nil
}

func knownDatastores(names []string) string {
	if len(names) == 0 {
		return "create it with `ferry datastore create -f datastore.yml` (docs/data.md)"
	}
	return fmt.Sprintf("known: %s; create it with `ferry datastore create -f datastore.yml`", strings.Join(names, ", "))
}

// timePtr is t, or nil for the zero time (a datastore stored before it
// had the time), so that the view leaves it out.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
