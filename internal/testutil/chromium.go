package testutil

import (
	"os/exec"
	"testing"
)

// RequireChromium skips the test unless Debian's chromium (or another
// Chromium or Chrome) is installed, and returns its path: the studio's
// browser tests drive it headless.
func RequireChromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	skip(t, "needs a Chromium browser: install chromium (apt-get install chromium) or run scripts/test-setup.sh")
	return ""
}
