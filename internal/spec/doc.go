// Package spec reads and validates the files users bring: Azure ML CLI v2
// command job files and compute files, in YAML, and the same specs as JSON
// from the REST API.
//
// Reading is strict. Unknown fields, values of the wrong kind and invalid
// values are errors that name the field by its dotted path
// ("inputs.data.path"), give its line in the file where known, and say what
// to write instead; an unknown field comes with the field probably meant.
// Every error is collected, not just the first, into an Errors, so that a
// file is fixed in one go and the API can return each problem on its own.
//
// A spec read from YAML is exactly what the API would decode from its JSON
// encoding (json.Marshal, then DecodeJobJSON or DecodeComputeJSON), so the
// CLI can send what it parsed and the server stores what it received,
// unchanged. The short forms of Azure ML files (`epochs: 5` for a literal
// input, `environment: azureml:name:1` for a reference) are accepted in both
// forms.
package spec
