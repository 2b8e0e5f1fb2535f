package testutil

import (
	"net/http"
	"testing"
	"time"
)

// TestRegistry is the registry scripts/registry-up.sh starts for the
// tests, and its login (fixed test data, not a secret).
type TestRegistry struct {
	Addr, Username, Password string
}

// Registry skips the test unless the test registry answers (under
// CI=true it fails), and returns it.
func Registry(t testing.TB) TestRegistry {
	t.Helper()
	r := TestRegistry{Addr: "127.0.0.1:5000", Username: "ferry", Password: "ferry-test-registry"}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + r.Addr + "/v2/")
	if err != nil {
		skip(t, "needs the test registry at %s (%v): run sudo scripts/registry-up.sh", r.Addr, err)
		return r
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		skip(t, "%s answers /v2/ with %s, not as the test registry (htpasswd logins); stop it and run sudo scripts/registry-up.sh", r.Addr, resp.Status)
	}
	return r
}
