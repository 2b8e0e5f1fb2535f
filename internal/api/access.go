package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/ferry-ml/ferry/internal/apperr"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// authorize decides whether who may call rt on r from the route and the
// request's path alone, before the handler reads a byte of the body or the
// query: a token without the right is answered 403 whatever it sent, never
// a 400 that tells it how to shape a call it may not make (issue 29: the
// handlers of the runner and agent routes decoded the body before the
// workspace checked whose job or node it was). The workspace checks the
// same again; this is the one gate in front of every route.
//
//   - The owner may call every route but the agents' (rt.node), which act
//     as one node and which no owner call needs.
//   - A run token may call the run routes (rt.run): those that name a job
//     ({name}) only for its own job, and those that name an attempt
//     ({attempt}) only for its own attempt. The blob and snapshot routes
//     name neither; the workspace limits what a run token sees there.
//   - A node's token may call the agents' routes of its own node ({node});
//     a join token only the join route, which names no node.
func authorize(rt route, who auth.Principal, r *http.Request) error {
	hasParam := func(p string) bool { return strings.Contains(rt.path, "{"+p+"}") }
	switch who.Kind {
	case auth.KindOwner:
		if rt.node {
			return apperr.Forbidden("%s %s is for node agents; the owner token may not call it", rt.method, rt.path)
		}
		return nil
	case auth.KindRun:
		if !rt.run {
			return apperr.Forbidden("a run token may not call %s %s", rt.method, rt.path)
		}
		if hasParam("name") && r.PathValue("name") != who.Subject {
			return apperr.Forbidden("this run token is job %s's; it may not call %s for job %s", who.Subject, rt.path, r.PathValue("name"))
		}
		if hasParam("attempt") {
			if a, err := strconv.Atoi(r.PathValue("attempt")); err != nil || a != who.Attempt {
				return apperr.Forbidden("this token belongs to attempt %d of job %s, not %q", who.Attempt, who.Subject, r.PathValue("attempt"))
			}
		}
		return nil
	case workspace.KindNode:
		if !rt.node || !hasParam("node") {
			return apperr.Forbidden("a node token may not call %s %s", rt.method, rt.path)
		}
		if r.PathValue("node") != who.Subject {
			return apperr.Forbidden("this token is node %s's; it may not call %s for node %s", who.Subject, rt.path, r.PathValue("node"))
		}
		return nil
	case workspace.KindJoin:
		if !rt.node || hasParam("node") {
			return apperr.Forbidden("a join token may only join (POST /v1/nodes/join), not call %s %s", rt.method, rt.path)
		}
		return nil
	}
	return apperr.Forbidden("a %s token may not call %s %s", who.Kind, rt.method, rt.path)
}
