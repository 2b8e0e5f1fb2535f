package cli

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"errors"
	"fmt"
	"os"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/environment"
	"github.com/ferry-ml/ferry/internal/spec"
)

// deploymentFiles are the local files an online or batch deployment file
// names, each relative to the file that names it: its code, an inline
// model, and its inline environment's conda file or build context. They
// are checked before the workspace is asked about what the deployment
// refers to, and uploaded once it has answered.
type deploymentFiles struct {
	code, model *pathField
	env         *spec.Environment
	envSrc      specFile // the file env is written in, and where in it
	envField    string
}

// checkDeploymentFiles lists the files of a deployment written in src,
// whose environment env (inline, as inlineEnvironmentFile returns it) is
// written at envField of envSrc, and checks that each is local and
// there.
func checkDeploymentFiles(src specFile, code *spec.CodeConfiguration, model *spec.ModelRef, env *spec.Environment, envSrc specFile, envField string) (deploymentFiles, error) {
	files := deploymentFiles{env: env, envSrc: envSrc, envField: envField}
	var paths []pathField
	if code != nil {
		files.code = &pathField{file: src, field: "code_configuration.code", value: code.Code}
		paths = append(paths, *files.code)
	}
	if model != nil && model.Ref == "" {
		files.model = &pathField{file: src, field: "model.path", value: model.Path}
		paths = append(paths, *files.model)
	}
	if p, field := environment.ContextPath(env); p != "" && env.Ref == "" {
		paths = append(paths, pathField{file: envSrc, field: envField + field, value: p})
	}
	for _, f := range paths {
		if isRemote(f.value) {
			return files, f.errorf("%q is not a local path; ferry uploads the local file or folder it names", f.value)
		}
		if _, err := os.Stat(f.path()); errors.Is(err, os.ErrNotExist) {
			return files, f.notFound()
		}
	}
	return files, nil
}

// upload sends what the workspace lacks of the files.
func (files deploymentFiles) upload(ctx context.Context, a *app, c *client.Client) (apitypes.DeploymentUploads, error) {
	var up apitypes.DeploymentUploads
	limit, err := a.snapshotLimit("")
	if err != nil {
		return up, fmt.Errorf("FERRY_MAX_SNAPSHOT_SIZE: %w", err)
	}
	if files.code != nil {
		if up.CodeSnapshot, err = a.upload(ctx, c, *files.code, "", limit, true); err != nil {
			return up, err
		}
	}
	if files.model != nil {
		if up.ModelSnapshot, err = a.upload(ctx, c, *files.model, "", limit, false); err != nil {
			return up, err
		}
	}
	up.EnvironmentSnapshot, err = a.uploadEnvironmentFiles(ctx, c, files.envField, files.envSrc, files.env, limit)
	return up, err
}
