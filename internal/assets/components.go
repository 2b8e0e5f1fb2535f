package assets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ferry-ml/ferry/internal/apitypes"
	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
)

func (a *Assets) components() registry[store.Component] {
	return registry[store.Component]{what: "component", plural: "components", command: "component",
		list: a.st.ListComponents, get: a.st.GetComponent,
		key: func(c store.Component) (string, string, bool) { return c.Name, c.Version, false }}
}

func componentView(rec store.Component) (*apitypes.Component, error) {
	var c spec.Component
	if err := json.Unmarshal(rec.Spec, &c); err != nil {
		return nil, fmt.Errorf("component %s:%s: stored spec: %w", rec.Name, rec.Version, err)
	}
	return &apitypes.Component{ID: "azureml:" + rec.Name + ":" + rec.Version, Name: rec.Name, Version: rec.Version,
		DisplayName: c.DisplayName, Description: rec.Description, Hash: rec.Hash, Created: rec.Created, Spec: &c}, nil
}

// ComponentDigest identifies what a component runs: its command, code,
// environment, inputs and outputs, resources and distribution, not its
// name, version, description or tags. Two components with one digest
// run the same thing; a step's reuse key starts from it.
func ComponentDigest(c *spec.Component) string {
	what := struct {
		Type                 string                          `json:"type"`
		Inputs               map[string]spec.ComponentInput  `json:"inputs,omitempty"`
		Outputs              map[string]spec.ComponentOutput `json:"outputs,omitempty"`
		Command              string                          `json:"command"`
		CodeSnapshot         string                          `json:"code_snapshot,omitempty"`
		Environment          *spec.Environment               `json:"environment,omitempty"`
		EnvironmentSnapshot  string                          `json:"environment_snapshot,omitempty"`
		EnvironmentVariables map[string]string               `json:"environment_variables,omitempty"`
		Resources            *spec.Resources                 `json:"resources,omitempty"`
		Distribution         *spec.Distribution              `json:"distribution,omitempty"`
		Limits               *spec.Limits                    `json:"limits,omitempty"`
	}{c.Type, c.Inputs, c.Outputs, c.Command, c.CodeSnapshot, c.Environment, c.EnvironmentSnapshot,
		c.EnvironmentVariables, c.Resources, c.Distribution, c.Limits}
	raw, _ := json.Marshal(what) // plain data: cannot fail
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// CreateComponent registers a version of a command component whose code
// (when it has code:) is the uploaded snapshot c.CodeSnapshot. Versions
// follow the rules of data assets: a version never changes; the same
// content with no version given is the latest version; a new content
// with no version gets the next number.
func (a *Assets) CreateComponent(ctx context.Context, who auth.Principal, c *spec.Component) (*apitypes.Component, error) {
	if !who.IsOwner() {
		return nil, apperr.Forbidden("a run token cannot register components")
	}
	if c == nil {
		return nil, apperr.Invalid("the component is missing")
	}
	if err := c.Validate(); err != nil {
		return nil, &apperr.Error{Code: apperr.CodeInvalid, Msg: err.Error(), Err: err}
	}
	if err := a.CheckComponentUploads(c, ""); err != nil {
		return nil, err
	}
	if _, err := a.ResolveEnvironment(ctx, c.Environment, c.EnvironmentSnapshot); err != nil {
		return nil, err
	}
	hash := ComponentDigest(c)
	versions, err := a.st.ListComponents(ctx, c.Name)
	if err != nil {
		return nil, err
	}
	reg := a.components()
	version := c.Version
	if version == "" {
		if latest, ok := reg.latest(versions); ok && latest.Hash == hash {
			return componentView(latest)
		}
		version = reg.next(versions)
	}
	for _, v := range versions {
		if v.Version != version {
			continue
		}
		if v.Hash == hash {
			return componentView(v)
		}
		return nil, apperr.Conflict("component %s:%s is registered with other content (command, code, environment, inputs or outputs), and versions do not change; give a new version, or leave version out to get %s", c.Name, version, reg.next(versions))
	}
	c.Version = version
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	rec := store.Component{Name: c.Name, Version: version, Description: c.Description, Spec: raw,
		CodeSnapshot: c.CodeSnapshot, Hash: hash, Created: a.now()}
	if err := a.st.CreateComponent(ctx, rec); err != nil {
		if errors.Is(err, store.ErrConflict) {
			if other, gerr := a.st.GetComponent(ctx, c.Name, version); gerr == nil && other.Hash == hash {
				return componentView(other)
			}
			return nil, apperr.Conflict("component %s:%s was registered at the same time by someone else with other content; run the command again", c.Name, version)
		}
		return nil, apperr.NoSpace(err, "component "+c.Name+":"+version)
	}
	return componentView(rec)
}

// CheckComponentUploads checks that a component's code and environment
// files were uploaded; f prefixes the fields named.
func (a *Assets) CheckComponentUploads(c *spec.Component, f string) error {
	if c.Code != "" && c.CodeSnapshot == "" {
		return apperr.Invalid("%scode: the component names code %q but no code snapshot was uploaded with it (`ferry component create -f` uploads it)", f, c.Code)
	}
	if c.CodeSnapshot != "" {
		if err := a.core.RequireSnapshot(c.CodeSnapshot, f+"code"); err != nil {
			return err
		}
	}
	if c.EnvironmentSnapshot != "" {
		if err := a.core.RequireSnapshot(c.EnvironmentSnapshot, f+"environment"); err != nil {
			return err
		}
	}
	return nil
}

// GetComponent returns one version of a component; version "" or
// "latest" is the newest.
func (a *Assets) GetComponent(ctx context.Context, name, version string) (*apitypes.Component, error) {
	rec, err := a.components().lookup(ctx, name, version)
	if err != nil {
		return nil, err
	}
	return componentView(rec)
}

// ListComponents returns the versions of every component, or of one, in
// registration order.
func (a *Assets) ListComponents(ctx context.Context, name string) ([]*apitypes.Component, error) {
	recs, err := a.st.ListComponents(ctx, name)
	if err != nil {
		return nil, err
	}
	out := []*apitypes.Component{}
	for _, r := range recs {
		v, err := componentView(r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
