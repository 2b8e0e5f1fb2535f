package client

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/ferry-ml/ferry/internal/spec"
)

// OnlineEndpoints are the online endpoints.
var OnlineEndpoints = Named[apitypes.OnlineEndpoint, *spec.OnlineEndpoint]{Path: "/v1/online-endpoints"}

func endpointPath(name string) string { return OnlineEndpoints.ItemPath(name) }

// CreateOnlineEndpoint creates an online endpoint from its file.
func (c *Client) CreateOnlineEndpoint(ctx context.Context, e *spec.OnlineEndpoint) (*apitypes.OnlineEndpoint, error) {
	return OnlineEndpoints.Create(ctx, c, e)
}

// ListOnlineEndpoints lists the online endpoints.
func (c *Client) ListOnlineEndpoints(ctx context.Context) ([]*apitypes.OnlineEndpoint, error) {
	return OnlineEndpoints.List(ctx, c)
}

// GetOnlineEndpoint shows an online endpoint.
func (c *Client) GetOnlineEndpoint(ctx context.Context, name string) (*apitypes.OnlineEndpoint, error) {
	return OnlineEndpoints.Get(ctx, c, name)
}

// UpdateOnlineEndpoint changes an online endpoint.
func (c *Client) UpdateOnlineEndpoint(ctx context.Context, name string, u apitypes.EndpointUpdate) (*apitypes.OnlineEndpoint, error) {
	var out apitypes.OnlineEndpoint
	return &out, c.do(ctx, "PATCH", endpointPath(name), u, &out)
}

// DeleteOnlineEndpoint deletes an online endpoint.
func (c *Client) DeleteOnlineEndpoint(ctx context.Context, name string) error {
	return OnlineEndpoints.Delete(ctx, c, name)
}

// GetEndpointCredentials returns an endpoint's keys.
func (c *Client) GetEndpointCredentials(ctx context.Context, name string) (*apitypes.EndpointKeys, error) {
	var out apitypes.EndpointKeys
	return &out, c.do(ctx, "POST", endpointPath(name)+"/list-keys", nil, &out)
}

// RegenerateEndpointKey replaces an endpoint's primary or secondary key.
func (c *Client) RegenerateEndpointKey(ctx context.Context, name, keyType string) (*apitypes.OnlineEndpoint, error) {
	var out apitypes.OnlineEndpoint
	return &out, c.do(ctx, "POST", endpointPath(name)+"/regenerate-keys", apitypes.RegenerateKeysRequest{KeyType: keyType}, &out)
}

// ScoreError is an answer of an endpoint other than 2xx: its status and
// the gateway's (or the scoring script's) message.
type ScoreError struct {
	Status  int
	Message string
}

func (e *ScoreError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// Score posts body to an endpoint's scoring URI with key (not the
// workspace token), and deployment in the azureml-model-deployment
// header when it is not empty. It returns the answer's body; an answer
// other than 2xx is a *ScoreError.
func (c *Client) Score(ctx context.Context, scoringURI, key, deployment string, body io.Reader) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", scoringURI, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	if deployment != "" {
		req.Header.Set("azureml-model-deployment", deployment)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the endpoint at %s: %w", scoringURI, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		msg := string(data)
		var ge struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &ge) == nil && ge.Error.Message != "" {
			msg = ge.Error.Message
		}
		return nil, &ScoreError{Status: resp.StatusCode, Message: msg}
	}
	return data, nil
}
