package api

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// A token without the right to a route is answered 403 before anything it
// sent is read: the runner's and the agent's routes once decoded the body
// (and the query) first, so a run token posting a malformed report to
// another job's attempt got a 400 describing the body, and a node token
// the same for another node's heartbeat (issue 29). Every route of the
// table is called with a malformed body and query by each token that may
// not call it, as the path makes it: a run token of job mine, attempt 1,
// for job theirs or attempt 2; node mine's token and join token for node
// theirs; the owner on the agents' routes.
func TestForbiddenBeforeTheBodyIsRead(t *testing.T) {
	srv, owner := testServer(t, &paperProvider{tokens: map[string]string{}})
	api := srv.Config.Handler.(*Server)
	tokens := map[string]store.Token{
		"run":  {Kind: auth.KindRun, Subject: "mine", Attempt: 1},
		"node": {Kind: workspace.KindNode, Subject: "mine"},
		"join": {Kind: workspace.KindJoin, Subject: "mine"},
	}
	for secret, tok := range tokens {
		tok.Hash, tok.Created = auth.Hash("fry_"+secret), time.Now()
		if err := api.tokens.CreateToken(context.Background(), tok); err != nil {
			t.Fatal(err)
		}
	}
	param := regexp.MustCompile(`\{([a-z]+)\}`)
	fill := func(path string, values map[string]string) string {
		return param.ReplaceAllStringFunc(path, func(p string) string {
			if v, ok := values[p[1:len(p)-1]]; ok {
				return v
			}
			return "x"
		})
	}
	// Every value the handlers check is bad: the body is not JSON (nor a
	// tar or snapshot stream), and the query's numbers are not numbers.
	const badQuery = "?wait=soon&offset=-1&rank=first&limit=many&seq=x&kind=nothing"
	tries := 0
	try := func(rt route, who, secret, path string) {
		t.Helper()
		tries++
		hdr := map[string]string{"Content-Type": "application/json"}
		code := call(t, srv, rt.method, path+badQuery, secret, strings.NewReader("{not json"), hdr, nil)
		if code != http.StatusForbidden {
			t.Errorf("%s %s with a malformed body, as %s: %d, want 403", rt.method, path, who, code)
		}
	}
	for _, rt := range api.routes {
		if rt.public {
			continue
		}
		has := func(p string) bool { return strings.Contains(rt.path, "{"+p+"}") }
		// A run token of another job, or of another attempt of its own.
		if !rt.run || has("name") {
			try(rt, "job mine's run token", "fry_run", fill(rt.path, map[string]string{"name": "theirs", "attempt": "1", "node": "mine"}))
		}
		if rt.run && has("attempt") {
			try(rt, "attempt 1's run token", "fry_run", fill(rt.path, map[string]string{"name": "mine", "attempt": "2"}))
		}
		// Node mine's tokens on another node's routes, or on routes not
		// theirs at all.
		try(rt, "node mine's token", "fry_node", fill(rt.path, map[string]string{"node": "theirs", "name": "mine"}))
		if !rt.node || has("node") {
			try(rt, "node mine's join token", "fry_join", fill(rt.path, map[string]string{"node": "mine", "name": "mine"}))
		}
		if rt.node {
			try(rt, "the owner", owner, fill(rt.path, map[string]string{"node": "mine"}))
		}
	}
	if tries < 2*len(api.routes) {
		t.Errorf("only %d calls for the %d routes of the table", tries, len(api.routes))
	}
}
