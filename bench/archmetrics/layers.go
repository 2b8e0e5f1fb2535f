package main

import "strings"

// role says which side of Ferry a package is on, beside its layer number:
// an edge package runs on a node or in front of a user and reaches the
// server only over the wire; a domain package is the server's records and
// rules (and the HTTP layer over them).
type role int

const (
	shared role = iota
	edge
	domain
)

// layer is one row of the table: a package path below the module (or a
// prefix ending in "/...", for the package and all below it), its layer
// number (0 leaf … 6 cmd) and its role.
type layer struct {
	pattern string
	rank    int
	role    role
}

// layers is the one table the arrows are judged by. A package that matches
// no row is reported as unclassified, so a new package (internal/apitypes,
// a workload package split from the workspace) shows up until it is given
// a row here. Rows for packages that do not exist yet are harmless.
var layers = []layer{
	// 0: leaves and pure decisions; wire types both sides share.
	{"internal/spec", 0, shared}, {"internal/sizes", 0, shared},
	{"internal/auth", 0, shared}, {"internal/blob", 0, shared},
	{"internal/snapshot", 0, shared}, {"internal/scheduler", 0, shared},
	{"internal/autoscale", 0, shared}, {"internal/instance", 0, shared},
	{"internal/schedule", 0, shared}, {"internal/sweep", 0, shared},
	{"internal/secrets", 0, shared}, {"internal/beneath", 0, shared},
	{"internal/apitypes", 0, shared}, {"internal/nodeproto", 0, shared},
	{"internal/session", 0, shared}, {"internal/isolation", 0, shared},
	{"internal/buildinfo", 0, shared}, {"internal/timerslack", 0, shared},
	{"internal/serverurl", 0, shared}, {"internal/tailbuf", 0, shared},
	{"internal/unixsock", 0, shared}, {"internal/httplimit", 0, shared},
	{"internal/envcatalog", 0, shared}, {"internal/runner/invocation", 0, shared},
	{"internal/serving/inferenceserver", 0, shared},
	{"internal/serving/batchdriver", 0, shared},
	{"internal/serving/probe", 0, shared}, {"internal/sshx", 0, shared},
	{"internal/kube", 0, shared}, {"internal/imagereg", 0, shared},
	{"internal/selfexe", 0, shared}, {"internal/fetch", 0, shared},
	{"internal/testutil", 0, shared}, {"examples", 0, shared},
	// 1: the node side and the client; environment builders both sides use.
	{"internal/runner", 1, edge}, {"internal/executor", 1, edge},
	{"internal/agent", 1, edge}, {"internal/client", 1, edge},
	{"internal/environment/...", 1, shared}, {"internal/envimage", 1, shared},
	// 2: the domain, and the drivers it is given.
	{"internal/store/...", 2, domain}, {"internal/workspace/...", 2, domain},
	{"internal/compute/...", 2, shared}, {"internal/provider/...", 2, shared},
	{"internal/serving/kubereplicas", 2, shared},
	// 3: HTTP over the domain; the studio, a client of it; the workloads
	// built on the job core, which the api calls and the server wires.
	{"internal/api", 3, domain}, {"internal/studio", 3, edge},
	{"internal/workload/...", 3, domain},
	{"internal/serving/gateway", 3, shared},
	// 4: server wiring. 5: the command line. 6: the binary, and the
	// harnesses that may reach everything.
	{"internal/server", 4, shared},
	{"internal/cli", 5, edge},
	{"cmd/...", 6, shared}, {"internal/e2e", 6, shared},
	{"internal/archtest", 6, shared},
}

// classify returns the row for pkg (a path below the module): an exact row
// before a "/..." row, the longest "/..." prefix among those.
func classify(pkg string) (layer, bool) {
	var best layer
	found := false
	for _, l := range layers {
		if l.pattern == pkg {
			return l, true
		}
		base, ok := strings.CutSuffix(l.pattern, "/...")
		if ok && (pkg == base || strings.HasPrefix(pkg, base+"/")) && len(l.pattern) > len(best.pattern) {
			best, found = l, true
		}
	}
	return best, found
}

// backUp says why the import from → to runs back up, or "" where it does
// not: to sits in a higher layer than from, or from is an edge package
// (runner, executor, agent, client, studio, cli) and to is the server's
// domain (store, workspace, api), whatever their layers.
func backUp(from, to layer) string {
	var why []string
	if to.rank > from.rank {
		why = append(why, "layer")
	}
	if from.role == edge && to.role == domain {
		why = append(why, "edge→domain")
	}
	return strings.Join(why, ",")
}
