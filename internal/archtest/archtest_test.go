// Package archtest guards the dependency direction of docs/architecture.md
// ("Packages and the direction of dependencies"):
// api → workspace → (store, scheduler, compute …); drivers never import the
// api; cmd/ only wires.
package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/ferry-ml/ferry/"

// forbidden maps a package to imports it must not have, directly or not.
var forbidden = map[string][]string{
	"internal/api":       {"internal/store/sqlite", "internal/compute/", "internal/server", "internal/cli", "internal/runner"},
	"internal/workspace": {"internal/api", "internal/store/sqlite", "internal/compute/", "internal/provider/", "internal/server", "internal/cli", "net/http", "k8s.io/"},
	// The registries are a part the workspace is built from: it imports
	// them, never the other way round; the core's errors are a leaf both use.
	"internal/assets": {"internal/workspace", "internal/api", "internal/server", "internal/store/sqlite"},
	"internal/apperr": {"internal/workspace", "internal/assets", "internal/api", "internal/server", "internal/store/sqlite"},
	// Workloads are domain code on the job core: no HTTP, no SQL, no
	// driver; the api serves their routes, the server wires them.
	"internal/workload/pipelines": {"internal/api", "internal/server", "internal/store/sqlite", "internal/compute/", "internal/cli", "net/http"},
	"internal/workload/schedules": {"internal/api", "internal/server", "internal/store/sqlite", "internal/compute/", "internal/cli", "net/http"},
	// The agent is what runs on nodes: no server code in it.
	"internal/agent":         {"internal/workspace", "internal/api", "internal/store", "internal/server", "internal/scheduler", "internal/autoscale"},
	"internal/provider/...":  {"internal/workspace", "internal/api", "internal/store", "internal/server"},
	"internal/compute/local": {"internal/api", "internal/workspace", "internal/store"},
	// The pool types' packages describe their type to the workspace, which
	// imports their description's package: they cannot import it back.
	"internal/compute/amlcompute":      {"internal/api", "internal/workspace", "internal/store", "internal/server"},
	"internal/compute/computeinstance": {"internal/api", "internal/workspace", "internal/store", "internal/server"},
	"internal/compute/virtualmachine":  {"internal/api", "internal/workspace", "internal/store", "internal/server"},
	"internal/compute/slurm":           {"internal/api", "internal/workspace", "internal/store", "internal/server", "internal/runner"},
	"internal/compute/kubernetes":      {"internal/api", "internal/workspace", "internal/store", "internal/server", "internal/runner"},
	"internal/store":                   {"internal/workspace", "internal/api"},
	"internal/spec":                    {"internal/"},
	"internal/snapshot":                {"internal/workspace", "internal/api", "internal/store"},
	"internal/scheduler":               {"internal/"},
	"internal/sizes":                   {"internal/"},
	"internal/envcatalog":              {"internal/"},
	"internal/instance":                {"internal/workspace", "internal/api", "internal/store", "internal/compute", "internal/server", "net/http"},
	"internal/nodeproto":               {"internal/"},
	"internal/autoscale":               {"internal/api", "internal/workspace", "internal/store", "internal/compute", "internal/server"},
	// The workspace resolves and hashes environments: the package must not
	// bring the builders' engines (Docker's HTTP client) into the domain.
	"internal/environment": {"internal/workspace", "internal/api", "internal/store", "internal/compute", "net/http"},
	// The agent links it: the session protocol brings no Ferry code along.
	"internal/session": {"internal/"},
	// The agent and the runner link it: the account jobs run as needs
	// nothing of Ferry's.
	"internal/isolation": {"internal/"},
	// Every launcher of a runner links it (the local target, the executor,
	// the agent): one runner command line, nothing of Ferry's behind it.
	"internal/runner/invocation": {"internal/"},
	// The conformance suite drives a server as a user does, through the
	// command line and the API, so that it holds for every target alike.
	"internal/compute/computetest": {"internal/workspace", "internal/store", "internal/server", "internal/api", "internal/compute/local", "internal/runner"},
	// The agent and the command line read their version through it.
	"internal/buildinfo": {"internal/"},
	// The server, the executor, the agent and the session server link it
	// for the timer slack of what they start: nothing of Ferry's behind it.
	"internal/timerslack": {"internal/"},
	// Opening paths beneath a folder a job can write: the runner, the
	// agent and the snapshot code link it; it knows nothing of Ferry.
	"internal/beneath": {"internal/"},
	// The limits of a listener anyone may reach: the server and the
	// gateway link it; it knows nothing of Ferry.
	"internal/httplimit": {"internal/"},
	// The replica side of serving: whichever launcher starts replicas (the
	// runner, the local target) links it without the server's code.
	"internal/serving/inferenceserver": {"internal/"},
	// Replicas on Kubernetes: the server wires it to a Kubernetes compute;
	// it knows nothing of the workspace's records, and the domain does
	// not link client-go.
	"internal/serving/kubereplicas": {"internal/workspace", "internal/api", "internal/store", "internal/server", "internal/compute/", "internal/cli"},
	// The online endpoints are a workload on the job core: the API and
	// the server wire it, it links neither, nor a driver or a Kubernetes
	// client (the server gives it KubeReplicas), nor the gateway (the
	// server gives it an EndpointRouter).
	"internal/workload/online": {"internal/api", "internal/server", "internal/store/sqlite", "internal/compute/", "internal/serving/gateway", "internal/serving/kubereplicas", "internal/cli", "net/http", "k8s.io/"},
	// The images Ferry builds for a cluster: the kubernetes target's jobs
	// and the server's deployments share it; it knows neither.
	"internal/envimage": {"internal/workspace", "internal/api", "internal/store", "internal/server", "internal/compute/", "internal/serving/", "internal/cli"},

	// The agent, the runner and the client link it: the file a server
	// records its URL in needs nothing of Ferry's.
	"internal/serverurl": {"internal/"},

	// A workload is built on the job core: the API reaches it, never the
	// other way round, and the store it reads is the core's, whatever
	// the driver.
	"internal/workload/batch": {"internal/api", "internal/server", "internal/store/sqlite", "internal/compute/", "internal/cli", "net/http"},

	// The studio's pages get their data from the REST API only, never
	// from the store, the domain or a driver.
	"internal/studio": {"internal/workspace", "internal/api", "internal/store", "internal/server", "internal/cli", "internal/compute/local", "internal/compute/slurm", "internal/compute/kubernetes", "internal/provider/", "internal/runner", "internal/scheduler", "internal/autoscale"},

	// What talks to a server speaks its wire types (internal/apitypes),
	// never its domain: each job's runner, the executor and the client
	// link none of the server's code, and a rename in the domain cannot
	// change the protocol unnoticed.
	"internal/runner":   {"internal/workspace", "internal/api", "internal/store", "internal/server", "internal/scheduler", "internal/autoscale"},
	"internal/executor": {"internal/workspace", "internal/api", "internal/store", "internal/server", "internal/scheduler", "internal/autoscale"},
	"internal/client":   {"internal/workspace", "internal/api", "internal/store", "internal/server", "internal/scheduler", "internal/autoscale"},
}

// forbiddenDirect maps a package to imports it must not have itself (it
// may reach them through a package it wires, as the command line reaches
// the server's code through internal/server for `ferry server`).
var forbiddenDirect = map[string][]string{
	"internal/cli": {"internal/workspace", "internal/api", "internal/store"},
}

// onlyImports maps a package to the only Ferry packages it may import.
var onlyImports = map[string][]string{
	// The wire types are a leaf: the job file's types, the resolved
	// environment a runner builds (environment.Spec, defined beside the
	// hash that is its identity) and a node's facts (nodeproto.Facts).
	"internal/apitypes": {"internal/spec", "internal/environment", "internal/nodeproto"},
}

func TestDirectImports(t *testing.T) {
	for pkg, bad := range forbiddenDirect {
		for _, imp := range directImports(t, pkg) {
			for _, b := range bad {
				if imp == mod+b {
					t.Errorf("%s imports %s: it talks to the server through internal/client and its wire types (internal/apitypes)", pkg, imp)
				}
			}
		}
	}
	for pkg, allowed := range onlyImports {
		for _, imp := range directImports(t, pkg) {
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			ok := false
			for _, a := range allowed {
				ok = ok || imp == mod+a
			}
			if !ok {
				t.Errorf("%s imports %s; it may import only %v of Ferry's packages", pkg, imp, allowed)
			}
		}
	}
}

// directImports lists pkg's non-test imports.
func directImports(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}}", mod+pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

func TestDependencyDirection(t *testing.T) {
	for pkg, bad := range forbidden {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", mod+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == mod+pkg {
				continue
			}
			for _, b := range bad {
				target := b
				if strings.HasPrefix(b, "internal/") {
					target = mod + b
				}
				if dep == target || (strings.HasSuffix(target, "/") && strings.HasPrefix(dep, target)) {
					t.Errorf("%s depends on %s, which the layering of docs/architecture.md forbids", pkg, dep)
				}
			}
		}
	}
}

func TestMainOnlyWires(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}}", mod+"cmd/ferry").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, imp := range strings.Fields(string(out)) {
		if strings.HasPrefix(imp, mod) && imp != mod+"internal/cli" {
			t.Errorf("cmd/ferry imports %s; main should only wire the cli", imp)
		}
	}
}

// heavyInits are packages whose init costs every process start of the
// ferry binary (each job's runner-shim and runner among them, see
// bench/dispatch) for work few processes need.
var heavyInits = map[string]string{
	// Its init registers every API group of Kubernetes in a scheme
	// (about 6 ms a start, and 50 MB of binary); internal/kube has a
	// scheme of the few groups Ferry uses, built on first use.
	"k8s.io/client-go/kubernetes/scheme": "use internal/kube, not client-go's typed clientset (k8s.io/client-go/kubernetes, informers, listers, dynamicinformer)",
}

func TestNoHeavyInitsInTheBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", mod+"cmd/ferry").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if fix, ok := heavyInits[dep]; ok {
			t.Errorf("cmd/ferry depends on %s: every process start of the binary pays for every package's init, and this one's is heavy; %s", dep, fix)
		}
	}
}
