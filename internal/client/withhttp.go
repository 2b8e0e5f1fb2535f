package client

import (
	"net/http"
	"strings"

	"github.com/ferry-ml/ferry/internal/serverurl"
)

// NewWithHTTP is New with the HTTP client requests are sent with: the
// studio's reaches the API in-process, through the same handlers and the
// same token checks as a request over the network.
func NewWithHTTP(baseURL, token string, hc *http.Client) *Client {
	return &Client{base: serverurl.New(baseURL, ""), token: strings.TrimSpace(token), http: hc}
}
