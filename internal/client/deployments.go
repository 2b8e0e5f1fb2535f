package client

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"io"
	"net/url"
	"strconv"

	"github.com/ferry-ml/ferry/internal/spec"
)

func deploymentsPath(endpoint string) string { return endpointPath(endpoint) + "/deployments" }

func deploymentPath(endpoint, name string) string {
	return deploymentsPath(endpoint) + "/" + url.PathEscape(name)
}

// CreateOnlineDeployment creates an online deployment of d.EndpointName
// whose files were uploaded as up; local runs its replica on the server's
// local target. It returns at once, the deployment Creating.
func (c *Client) CreateOnlineDeployment(ctx context.Context, d *spec.OnlineDeployment, up apitypes.DeploymentUploads, local bool) (*apitypes.OnlineDeployment, error) {
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	var out apitypes.OnlineDeployment
	return &out, c.do(ctx, "POST", deploymentsPath(d.EndpointName), apitypes.DeploymentRequest{Spec: raw, Uploads: up, Local: local}, &out)
}

// UpdateOnlineDeployment changes an online deployment to d. It returns at
// once, the deployment Updating.
func (c *Client) UpdateOnlineDeployment(ctx context.Context, d *spec.OnlineDeployment, up apitypes.DeploymentUploads) (*apitypes.OnlineDeployment, error) {
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	var out apitypes.OnlineDeployment
	return &out, c.do(ctx, "PUT", deploymentPath(d.EndpointName, d.Name), apitypes.DeploymentRequest{Spec: raw, Uploads: up}, &out)
}

// GetOnlineDeployment shows an online deployment.
func (c *Client) GetOnlineDeployment(ctx context.Context, endpoint, name string) (*apitypes.OnlineDeployment, error) {
	var out apitypes.OnlineDeployment
	return &out, c.do(ctx, "GET", deploymentPath(endpoint, name), nil, &out)
}

// ListOnlineDeployments lists an endpoint's deployments.
func (c *Client) ListOnlineDeployments(ctx context.Context, endpoint string) ([]*apitypes.OnlineDeployment, error) {
	var out []*apitypes.OnlineDeployment
	return out, c.do(ctx, "GET", deploymentsPath(endpoint), nil, &out)
}

// DeleteOnlineDeployment starts deleting an online deployment: it returns
// once the deployment is Deleting, not when it is gone.
func (c *Client) DeleteOnlineDeployment(ctx context.Context, endpoint, name string) error {
	return c.do(ctx, "DELETE", deploymentPath(endpoint, name), nil, nil)
}

// DeploymentLogs copies the end of each of a deployment's replicas' logs
// to w: the last lines lines of each, or all when lines is 0.
func (c *Client) DeploymentLogs(ctx context.Context, endpoint, name string, lines int, w io.Writer) error {
	path := deploymentPath(endpoint, name) + "/logs"
	if lines > 0 {
		path += "?lines=" + strconv.Itoa(lines)
	}
	resp, err := c.request(ctx, "GET", path, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}
