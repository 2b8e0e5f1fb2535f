package online

import (
	"strings"
	"testing"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/workload/workloadtest"
)

var owner = workloadtest.Owner

// wantCode fails unless err is of code and says each of words.
func wantCode(t *testing.T, what string, err error, code apperr.Code, words ...string) {
	t.Helper()
	if err == nil || apperr.CodeOf(err) != code {
		t.Fatalf("%s: got %v (code %d), want code %d", what, err, apperr.CodeOf(err), code)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q does not say %q", what, err, w)
		}
	}
}
