// Package serving holds what the workloads that serve models (online
// endpoints' deployments and batch endpoints' jobs) both do to a job:
// laying out the model where Azure's scoring scripts look for it.
package serving

import "strings"

// ModelDir is the shell that lays out AZUREML_MODEL_DIR as Azure does
// (setup, which ends in "&& " when not empty) and the variable's
// assignment (" AZUREML_MODEL_DIR=..."), for a job with the model as its
// input model: a model that is a file is in the input's folder by its
// name, so that folder is the variable; a model that is a folder is a
// folder under its own name in .azureml-models, the variable.
//
// That folder must be a real one, not a link to the input: a scoring
// script that walks the variable with os.walk, which does not follow
// links, would find nothing. The input is moved there, not copied nor
// linked: the runner extracts each attempt's inputs as copies of their
// own (the node's blob cache is never hard-linked into a job), in the
// attempt's folder, on one file system (and one mount, in a container)
// with its working directory, so the move is a rename that costs
// nothing, and a replica writing into its model changes no other
// replica's files, nor the cache.
func ModelDir(hasModel bool, modelFolder string) (setup, assign string) {
	switch {
	case hasModel && modelFolder != "":
		dest := ".azureml-models/" + ShellQuote(modelFolder)
		return `mkdir -p .azureml-models && rm -rf ` + dest + ` && mv "${{inputs.model}}" ` + dest + " && ",
			` AZUREML_MODEL_DIR="$PWD/.azureml-models"`
	case hasModel:
		return "", ` AZUREML_MODEL_DIR="${{inputs.model}}"`
	}
	return "", ""
}

// ShellQuote quotes s for a POSIX shell.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
