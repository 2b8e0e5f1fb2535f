package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/spec"
)

// Outputs with name: (and version:) register as data assets when their
// job completes, as Azure ML registers them: a command job's, a pipeline
// step's (its command job's), a sweep's (its best trial's) and a
// pipeline's own. The asset's files are the output's snapshot; its tags
// name the job and the output. What was registered, or why not, is a line
// of the job's log.
//
// The registration follows the job's end and is not part of its
// transaction: a server killed between the two leaves the output
// unregistered, and `ferry data create` registers it from
// `ferry job download JOB --output-name NAME`.

// assetOutputs are the outputs of a stored spec that name a data asset.
func assetOutputs(specJSON []byte) map[string]spec.Output {
	// Most jobs declare no outputs: a look for the key spares them the
	// decoding of their spec at their end (bench/dispatch).
	if !bytes.Contains(specJSON, []byte(`"outputs"`)) {
		return nil
	}
	var sp struct {
		Outputs map[string]spec.Output `json:"outputs"`
	}
	if json.Unmarshal(specJSON, &sp) != nil {
		return nil
	}
	out := map[string]spec.Output{}
	for k, o := range sp.Outputs {
		if o.Name != "" {
			out[k] = o
		}
	}
	return out
}

// registerOutputs registers the outputs of the completed job that name a
// data asset: declared are its outputs (by name), outputsJSON its stored
// Outputs, createdBy who the assets are registered for. What it did goes
// to the log of the job's attempt (none for a sweep's or a pipeline's
// record, which have no attempt: the server's log only).
func (s *Service) registerOutputs(ctx context.Context, job string, attempt int, createdBy string, declared map[string]spec.Output, outputsJSON []byte) {
	if len(declared) == 0 {
		return
	}
	var got Outputs
	if len(outputsJSON) > 0 {
		if err := json.Unmarshal(outputsJSON, &got); err != nil {
			s.log.Error("register outputs", "job", job, "err", err)
			return
		}
	}
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(declared)) {
		o := declared[k]
		snap := got.Named[k]
		if snap == "" {
			lines = append(lines, fmt.Sprintf("output %s is not registered as data asset %s: the job wrote nothing there", k, o.Name))
			continue
		}
		desc := o.Description
		if desc == "" {
			desc = fmt.Sprintf("output %s of job %s", k, job)
		}
		f := &spec.DataFile{Name: o.Name, Version: o.Version, Type: spec.OutputAssetType(o.Type), Path: "outputs/" + k,
			Description: desc, Tags: map[string]string{"ferry.job": job, "ferry.output": k}}
		a, err := s.CreateData(ctx, auth.Principal{Kind: auth.KindOwner, Subject: createdBy}, f, snap)
		if err != nil {
			lines = append(lines, fmt.Sprintf("output %s is not registered as data asset %s: %v", k, o.Name, err))
			continue
		}
		lines = append(lines, fmt.Sprintf("output %s registered as data asset %s", k, a.ID))
	}
	if attempt > 0 {
		var b strings.Builder
		for _, l := range lines {
			b.WriteString("ferry: " + l + "\n")
		}
		if _, err := s.logs.Append(job, attempt, 0, s.logs.Size(job, attempt, 0), []byte(b.String())); err != nil {
			s.log.Warn("register outputs: log", "job", job, "err", err)
		}
	}
	s.log.Info("outputs registered", "job", job, "lines", strings.Join(lines, "; "))
}
