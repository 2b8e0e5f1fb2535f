// Package agent is the node agent, `ferry agent`: the one process on each
// node of a pool target (cluster, compute instance, attached machine) that
// joins the workspace with the compute's join token, reports what the node
// is (CPUs, memory, GPUs), renews the node's lease with heartbeats that say
// which attempts run there, long-polls for assignments and starts one
// `ferry runner` per assignment (docs/architecture.md, "How a job runs"). It also
// serves the exec, shell and port-forward sessions of its instance
// (package session), which its polls ask for. It speaks only the wire
// protocols of packages nodeproto and session and links no server code.
//
// Runners belong to their jobs, not to the agent: each is started in its
// own session, reports to the workspace with its own run token and keeps
// going when the agent stops, is restarted, or loses the server. So the
// agent never stops a runner except when the server asks it to (a Stop in
// a heartbeat reply), and a restarted agent adopts the runners it finds in
// its state file (DIR/agent-state.json), identified by pid and process
// start time so a recycled pid is never taken for a runner.
//
// Failure handling, in short: a server that cannot be reached or answers
// 5xx is retried with a capped backoff, forever, while runners carry on;
// a join refused with a 4xx is fatal; a heartbeat or poll refused with
// 401, 403 or 404 means the server has forgotten the node, and the agent
// exits with ErrForgotten, leaving its runners to finish on their own.
package agent
