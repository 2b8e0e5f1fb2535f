package client

import (
	"net/http"
	"strings"
)

// NewWithHTTP is New with the HTTP client requests are sent with: the
// studio's reaches the API in-process, through the same handlers and the
// same token checks as a request over the network.
func NewWithHTTP(baseURL, token string, hc *http.Client) *Client {
	return &Client{base: strings.TrimRight(baseURL, "/"), token: strings.TrimSpace(token), http: hc}
}
