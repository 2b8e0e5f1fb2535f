package main

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferry-ml/ferry/internal/client"
	"github.com/ferry-ml/ferry/internal/serving/inferenceserver"
	"github.com/ferry-ml/ferry/internal/snapshot"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// The second part measures real deployments: a `ferry server` process,
// an endpoint, and deployments whose replicas are jobs on pool nodes (the
// serverless cluster of their instance_type, nodes of the process
// provider on this machine), all through the API and the gateway as a
// user reaches them.

// deploymentTimeout bounds every wait for a deployment: it covers
// starting pool nodes on a loaded 2-core machine.
const deploymentTimeout = 120 * time.Second

// deployAPI makes the deployment calls the client package does not have
// yet (the API's route is temporary, internal/api/deployments_tmp.go).
type deployAPI struct {
	url, token, endpoint string
	uploads              apitypes.DeploymentUploads
}

// put creates (POST) or changes (PUT) a deployment.
func (a *deployAPI) put(ctx context.Context, method string, d *spec.OnlineDeployment) error {
	path := "/v1/online-endpoints/" + a.endpoint + "/deployments"
	if method == http.MethodPut {
		path += "/" + d.Name
	}
	body, err := json.Marshal(map[string]any{"spec": d, "uploads": a.uploads, "local": false})
	if err != nil {
		return err
	}
	return a.call(ctx, method, path, body, nil)
}

// get shows a deployment.
func (a *deployAPI) get(ctx context.Context, name string) (*apitypes.OnlineDeployment, error) {
	var d apitypes.OnlineDeployment
	return &d, a.call(ctx, http.MethodGet, "/v1/online-endpoints/"+a.endpoint+"/deployments/"+name, nil, &d)
}

func (a *deployAPI) call(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, a.url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// wait polls a deployment every 50 ms until done says it is, and
// returns it; it fails when the deployment is Failed or deploymentTimeout
// passes.
func (a *deployAPI) wait(ctx context.Context, name, what string, done func(*apitypes.OnlineDeployment) bool) (*apitypes.OnlineDeployment, error) {
	deadline := time.Now().Add(deploymentTimeout)
	for {
		d, err := a.get(ctx, name)
		if err != nil {
			return nil, err
		}
		if done(d) {
			return d, nil
		}
		if d.ProvisioningState == apitypes.DeploymentFailed {
			return nil, fmt.Errorf("deployment %s failed: %s", name, d.Reason)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("deployment %s: not %s after %v; it is %s, replicas %+v", name, what, deploymentTimeout, d.ProvisioningState, d.Replicas)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func succeeded(d *apitypes.OnlineDeployment) bool {
	return d.ProvisioningState == apitypes.DeploymentSucceeded
}

// runDeployments measures a rolling update under constant load and a cold
// start from zero through real deployments, with a replica started
// directly as the cold start's peer.
func runDeployments(ctx context.Context, n, conc, workers, rounds, clients, updates, colds int) error {
	if clients < 1 || updates < 0 || colds < 1 {
		return fmt.Errorf("-clients and -colds must be at least 1 and -updates at least 0 (got %d, %d, %d)", clients, colds, updates)
	}
	fmt.Printf("\ndeployments: a real ferry server, replicas on pool nodes (Standard_DS1_v2, process provider), the same score.py\n\n")
	srv, err := startFerryServer(ctx, "--serverless-idle", "60s")
	if err != nil {
		return fmt.Errorf("start ferry server: %w", err)
	}
	defer srv.end()
	err = measureDeployments(ctx, srv, n, conc, workers, rounds, clients, updates, colds)
	if err != nil && ctx.Err() == nil { // not when interrupted
		err = fmt.Errorf("%w\nthe server's output ends:\n%s", err, srv.outputTail())
	}
	return err
}

func measureDeployments(ctx context.Context, srv *ferryServer, n, conc, workers, rounds, clients, updates, colds int) error {
	c := client.New(srv.url, srv.token)
	ep, err := c.CreateOnlineEndpoint(ctx, &spec.OnlineEndpoint{Name: "bench", AuthMode: "key"})
	if err != nil {
		return fmt.Errorf("create the endpoint: %w", err)
	}
	keys, err := c.GetEndpointCredentials(ctx, ep.Name)
	if err != nil {
		return fmt.Errorf("the endpoint's keys: %w", err)
	}
	code := filepath.Join(srv.root, "app", "code")
	if err := os.MkdirAll(code, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(code, "score.py"), []byte(score), 0o644); err != nil {
		return err
	}
	tree, err := snapshot.Walk(code, snapshot.BuildOptions{})
	if err != nil {
		return err
	}
	codeID, _, err := c.UploadTree(ctx, tree, nil)
	if err != nil {
		return fmt.Errorf("upload the code: %w", err)
	}
	api := &deployAPI{url: srv.url, token: srv.token, endpoint: ep.Name, uploads: apitypes.DeploymentUploads{CodeSnapshot: codeID}}

	// 1. A rolling update under constant load.
	blue := &spec.OnlineDeployment{Name: "blue", EndpointName: ep.Name, InstanceType: "Standard_DS1_v2", InstanceCount: 2,
		CodeConfiguration:    &spec.CodeConfiguration{Code: "code", ScoringScript: "score.py"},
		EnvironmentVariables: map[string]string{"VERSION": "v1", "WORKER_COUNT": strconv.Itoa(workers)},
		// One replica can take every client's request at once, so that
		// a request fails only when the update loses it.
		RequestSettings: &spec.RequestSettings{MaxConcurrentRequestsPerInstance: clients}}
	t0 := time.Now()
	if err := api.put(ctx, http.MethodPost, blue); err != nil {
		return err
	}
	d, err := api.wait(ctx, "blue", "Succeeded", succeeded)
	if err != nil {
		return err
	}
	fmt.Printf("blue created to Succeeded (pool nodes started, %d replicas ready on %s): %v\n", len(d.Replicas), d.Compute, time.Since(t0).Round(time.Millisecond))
	// The pool nodes are on this host: the server's gateway reaches their
	// replicas at their Unix sockets.
	sockets, workerSockets := 0, 0
	var replicaURLs []string
	for _, r := range d.Replicas {
		if r.Socket != "" {
			sockets++
		}
		if len(r.WorkerSockets) > 0 {
			workerSockets++
		}
		url := inferenceserver.URL(r.Address) + "/score"
		replicaURLs = append(replicaURLs, url)
		// The bench holds the server's data dir, and so its workspace key:
		// it derives each replica's secret as the server does, to call the
		// replica directly as the gateway does.
		secret, err := srv.replicaSecret(ctx, c, r.Job)
		if err != nil {
			return fmt.Errorf("replica %s's secret: %w", r.Job, err)
		}
		replicaSecrets[url] = secret
	}
	fmt.Printf("blue's replicas reached by the gateway at their Unix sockets: %d of %d; at their workers' own sockets: %d of %d\n", sockets, len(d.Replicas), workerSockets, len(d.Replicas))
	if _, err := c.UpdateOnlineEndpoint(ctx, ep.Name, apitypes.EndpointUpdate{Traffic: map[string]int{"blue": 100}}); err != nil {
		return fmt.Errorf("traffic blue=100: %w", err)
	}
	if err := throughput(replicaURLs, ep.ScoringURI, keys.PrimaryKey, srv.cmd.Process.Pid, n, conc, rounds); err != nil {
		return err
	}
	if err := rollingUpdates(ctx, api, blue, ep.ScoringURI, keys.PrimaryKey, clients, updates); err != nil {
		return err
	}

	// 2. A cold start from zero, the pool node up.
	zero := &spec.OnlineDeployment{Name: "zero", EndpointName: ep.Name, InstanceType: "Standard_DS1_v2",
		CodeConfiguration: &spec.CodeConfiguration{Code: "code", ScoringScript: "score.py"},
		ScaleSettings:     &spec.ScaleSettings{Type: "target_utilization", MinInstances: new(0), MaxInstances: 1, ScaleToZeroAfter: 2, PollingInterval: 1}}
	t0 = time.Now()
	if err := api.put(ctx, http.MethodPost, zero); err != nil {
		return err
	}
	if _, err := api.wait(ctx, "zero", "Succeeded", succeeded); err != nil {
		return err
	}
	fmt.Printf("\nzero (min_instances 0, scale_to_zero_after 2 s) created to Succeeded: %v\n", time.Since(t0).Round(time.Millisecond))
	serverDir, err := inferenceserver.Install(filepath.Join(srv.root, "app", "server"))
	if err != nil {
		return err
	}
	viaDeployment, direct, err := coldStarts(ctx, c, api, ep.ScoringURI, keys.PrimaryKey, serverDir, code, colds)
	if err != nil {
		return err
	}
	dm, rm := medianDuration(viaDeployment), medianDuration(direct)
	fmt.Printf("cold start, median of %d: through the deployment %v, inference server started directly %v, ratio %.2f\n",
		colds, dm.Round(time.Millisecond), rm.Round(time.Millisecond), float64(dm)/float64(rm))
	return nil
}

// throughput compares, in alternated rounds at the same concurrency,
// scoring through the server's gateway (uri) with calling blue's replicas
// directly at their TCP ports (direct: the clients spread over them). It
// prints the server's CPU time per request in each (serverPID's: the
// gateway, and what else the server does meanwhile).
func throughput(direct []string, uri, key string, serverPID, n, conc, rounds int) error {
	server := strconv.Itoa(serverPID)
	fmt.Printf("throughput through the server's gateway against blue's %d replicas called directly, %d requests, concurrency %d:\n", len(direct), n, conc)
	if _, err := loadSpread(direct, "", min(n, 300), conc); err != nil { // warm the paths' connections
		return fmt.Errorf("direct: %w", err)
	}
	if _, err := load(uri, key, min(n, 300), conc); err != nil {
		return fmt.Errorf("through the gateway: %w", err)
	}
	var ratios []float64
	perRequest := func(from, to time.Duration) float64 { return float64((to - from).Microseconds()) / float64(n) }
	for i := range rounds {
		c0 := procCPU(server)
		d, err := loadSpread(direct, "", n, conc)
		if err != nil {
			return fmt.Errorf("direct: %w", err)
		}
		c1 := procCPU(server)
		g, err := load(uri, key, n, conc)
		if err != nil {
			return fmt.Errorf("through the gateway: %w", err)
		}
		c2 := procCPU(server)
		ratios = append(ratios, g.rate/d.rate)
		fmt.Printf("  round %d  direct %7.0f req/s  p50 %-9v | through the server's gateway %7.0f req/s  p50 %-9v | ratio %.3f | server CPU µs/request %.0f direct, %.0f through it | load average %s\n",
			i+1, d.rate, d.p50, g.rate, g.p50, g.rate/d.rate, perRequest(c0, c1), perRequest(c1, c2), loadAverage())
	}
	slices.Sort(ratios)
	fmt.Printf("  throughput through the server's gateway / direct, median of rounds: %.3f (aim: >= 0.8)\n\n", ratios[len(ratios)/2])
	return nil
}

// rollingUpdates changes blue's environment updates times while clients
// score through the gateway without a pause, and prints per update the
// time from the PUT to Succeeded (the new replicas ready, the old ones
// drained and gone) and the requests answered meanwhile.
func rollingUpdates(ctx context.Context, api *deployAPI, blue *spec.OnlineDeployment, uri, key string, clients, updates int) error {
	fmt.Printf("rolling updates of blue (2 replicas, traffic 100) under constant load from %d clients:\n", clients)
	l := startLoad(uri, key, clients)
	defer l.stop()
	time.Sleep(500 * time.Millisecond)
	for i := range updates {
		before := l.counts()
		blue.EnvironmentVariables = map[string]string{"VERSION": fmt.Sprintf("v%d", i+2)}
		t0 := time.Now()
		if err := api.put(ctx, http.MethodPut, blue); err != nil {
			return err
		}
		if _, err := api.wait(ctx, "blue", "Succeeded", succeeded); err != nil {
			return err
		}
		took := time.Since(t0)
		sent, failed := l.counts().since(before)
		fmt.Printf("  update %d  PUT to Succeeded %-9v requests %6d  failed %d\n", i+1, took.Round(time.Millisecond), sent, failed)
		time.Sleep(500 * time.Millisecond)
	}
	total := l.stop()
	sent, failed := total.since(loadCounts{})
	fmt.Printf("  total     %.1f s of load   requests %6d  failed %d  (answers by version %v)\n", total.elapsed.Seconds(), sent, failed, total.versions)
	if failed > 0 {
		fmt.Printf("  failures by status (0: no answer): %v; the first: %s\n", total.failures, strings.Join(total.first, " | "))
	}
	return nil
}

// constantLoad is clients sending requests one after the other until
// stopped.
type constantLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	start  time.Time
	mu     sync.Mutex
	c      loadCounts
}

// loadCounts are what a load got so far.
type loadCounts struct {
	sent     int
	failures map[int]int    // by status; 0 is no answer
	versions map[string]int // the answers' VERSION
	first    []string       // the first few failures, for a reader
	elapsed  time.Duration
}

func (c loadCounts) failed() int {
	n := 0
	for _, v := range c.failures {
		n += v
	}
	return n
}

// since is the requests sent and failed after before.
func (c loadCounts) since(before loadCounts) (sent, failed int) {
	return c.sent - before.sent, c.failed() - before.failed()
}

func startLoad(uri, key string, clients int) *constantLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &constantLoad{cancel: cancel, start: time.Now(), c: loadCounts{failures: map[int]int{}, versions: map[string]int{}}}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients * 2}, Timeout: 30 * time.Second}
	for range clients {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				status, body, err := post(ctx, hc, uri, key, "")
				if ctx.Err() != nil {
					return // cut short by stop: not an answer of the endpoint
				}
				l.add(status, body, err)
			}
		})
	}
	return l
}

func (l *constantLoad) add(status int, body []byte, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.c.sent++
	if err == nil && status == http.StatusOK {
		var a struct{ Version string }
		_ = json.Unmarshal(body, &a)
		l.c.versions[a.Version]++
		return
	}
	l.c.failures[status]++
	if len(l.c.first) < 3 {
		msg := fmt.Sprintf("%d %.120s", status, body)
		if err != nil {
			msg = err.Error()
		}
		l.c.first = append(l.c.first, msg)
	}
}

func (l *constantLoad) counts() loadCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.c
	c.failures, c.versions, c.first = maps.Clone(c.failures), maps.Clone(c.versions), slices.Clone(c.first)
	c.elapsed = time.Since(l.start)
	return c
}

// stop ends the load and returns what it got; it may be called again.
func (l *constantLoad) stop() loadCounts {
	l.cancel()
	l.wg.Wait()
	return l.counts()
}

// coldStarts alternates, colds times, a cold start through zero and one
// of its peer. Through zero: wait until it has no replica and a node of
// its pool is idle (a warm environment), then time its first request,
// which the gateway holds while a replica starts on the pool node, to the
// answer; it says which replica answered and whether its node was up
// before the request. The peer: the same score.py under Ferry's inference
// server (installed in serverDir) with the deployment's one worker,
// started by the bench itself, from the start of python3 to its first
// answer.
func coldStarts(ctx context.Context, c *client.Client, api *deployAPI, uri, key, serverDir, code string, colds int) (viaDeployment, direct []time.Duration, err error) {
	noReplica := func(d *apitypes.OnlineDeployment) bool { return len(d.Replicas) == 0 }
	hc := &http.Client{Timeout: deploymentTimeout}
	for i := range colds {
		z, err := api.wait(ctx, "zero", "scaled to zero", noReplica)
		if err != nil {
			return nil, nil, err
		}
		if err := waitIdleNode(ctx, c, z.Compute); err != nil {
			return nil, nil, err
		}
		t0 := time.Now()
		status, body, err := post(ctx, hc, uri, key, "zero")
		d := time.Since(t0)
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("status %d: %s", status, body)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("cold start %d through the deployment: %w", i+1, err)
		}
		where, err := replicaNode(ctx, c, api, t0)
		if err != nil {
			return nil, nil, err
		}

		t0 = time.Now()
		r, err := startReplica(ctx, serverDir, code, 1)
		if err != nil {
			return nil, nil, fmt.Errorf("start the inference server directly: %w", err)
		}
		_, err = request(http.DefaultClient, r.url+"/score", "")
		p := time.Since(t0)
		r.stop()
		if err != nil {
			return nil, nil, fmt.Errorf("cold start %d of the inference server: %w", i+1, err)
		}
		fmt.Printf("  cold start %d  through the deployment %-7v  inference server started directly %-7v %s\n",
			i+1, d.Round(time.Millisecond), p.Round(time.Millisecond), where)
		viaDeployment, direct = append(viaDeployment, d), append(direct, p)
	}
	return viaDeployment, direct, nil
}

// waitIdleNode waits until a node of compute is idle. (A replica's job
// may hold its node a moment after the replica left its deployment.)
func waitIdleNode(ctx context.Context, c *client.Client, compute string) error {
	deadline := time.Now().Add(deploymentTimeout)
	for {
		nodes, err := c.ListNodes(ctx, compute)
		if err != nil {
			return fmt.Errorf("nodes of %s: %w", compute, err)
		}
		if slices.ContainsFunc(nodes, func(n *apitypes.Node) bool { return n.State == workspace.NodeIdle }) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no node of %s idle after %v", compute, deploymentTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// replicaNode says which replica of zero runs and on which node, and
// whether the node was up before t0.
func replicaNode(ctx context.Context, c *client.Client, api *deployAPI, t0 time.Time) (string, error) {
	d, err := api.get(ctx, "zero")
	if err != nil {
		return "", err
	}
	if len(d.Replicas) == 0 {
		return "(its replica is already gone)", nil
	}
	job := d.Replicas[0].Job
	nodes, err := c.ListNodes(ctx, d.Compute)
	if err != nil {
		return "", fmt.Errorf("nodes of %s: %w", d.Compute, err)
	}
	for _, n := range nodes {
		if slices.Contains(n.Jobs, job) {
			up := "up before the request"
			if n.Created.After(t0) {
				up = "started for it"
			}
			return fmt.Sprintf("(replica %s on node %s, %s)", job, n.Name, up), nil
		}
	}
	return fmt.Sprintf("(replica %s, its node not found)", job), nil
}

func medianDuration(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
