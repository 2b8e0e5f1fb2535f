package workspace

import (
	"encoding/json"
	"fmt"

	"github.com/ferry-ml/ferry/internal/apitypes"
)

// storedInputs is the jobs.inputs column: a JSON object whose values are
// snapshot ids (strings, as every job stored before remote inputs) or
// remote inputs (objects).
func storedInputs(snaps map[string]string, remote map[string]apitypes.RemoteInput) (json.RawMessage, error) {
	if len(remote) == 0 {
		return json.Marshal(snaps)
	}
	all := map[string]any{}
	for k, v := range snaps {
		all[k] = v
	}
	for k, v := range remote {
		all[k] = v
	}
	return json.Marshal(all)
}

// readStoredInputs reads the jobs.inputs column into v.
func readStoredInputs(raw json.RawMessage, v *apitypes.Job) error {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(raw, &all); err != nil {
		return err
	}
	for k, r := range all {
		if len(r) > 0 && r[0] == '{' {
			var ri apitypes.RemoteInput
			if err := json.Unmarshal(r, &ri); err != nil {
				return fmt.Errorf("input %s: %w", k, err)
			}
			if v.RemoteInputs == nil {
				v.RemoteInputs = map[string]apitypes.RemoteInput{}
			}
			v.RemoteInputs[k] = ri
			continue
		}
		var id string
		if err := json.Unmarshal(r, &id); err != nil {
			return fmt.Errorf("input %s: %w", k, err)
		}
		if v.InputSnapshots == nil {
			v.InputSnapshots = map[string]string{}
		}
		v.InputSnapshots[k] = id
	}
	return nil
}
