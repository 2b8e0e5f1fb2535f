// Package nodeproto is the wire protocol between the workspace server and
// the node agents of pool targets (clusters, instances): what an agent
// sends when it joins, heartbeats and asks for work, and what it gets back.
// It imports nothing of Ferry's, so the agent links no server code.
//
// The calls, all JSON over the REST API (docs/architecture.md, "How a job runs"):
//
//	POST /v1/nodes/join                  bearer: the compute's join token
//	     JoinRequest -> JoinReply          (the reply's NodeToken is the agent's credential from then on)
//	POST /v1/nodes/{node}/heartbeat      bearer: node token
//	     Heartbeat -> HeartbeatReply       (renews the node's lease; says drain / stop attempts)
//	GET  /v1/nodes/{node}/assignments?wait=SECONDS   bearer: node token
//	     -> Assignments                    (long poll: answers at once when there is work,
//	                                        else after wait seconds with none)
//	GET  /v1/nodes/{node}/sessions/{id}  bearer: node token; Connection: Upgrade, Upgrade: ferry-session
//	     -> 101 Switching Protocols        (the agent's side of a session an Assignments reply
//	                                        asked for; the connection carries SSH from then on,
//	                                        with the agent as the server: see package session)
//
// An agent whose node token is refused (401/403) or whose node is gone
// (404) stops asking and exits: the server has forgotten it.
package nodeproto

// GPU is one GPU of a node, as nvidia-smi reports it.
type GPU struct {
	Index    int    `json:"index"`
	Name     string `json:"name,omitempty"`
	MemoryMB int64  `json:"memory_mb,omitempty"`
}

// Facts are what a node is.
type Facts struct {
	Hostname    string `json:"hostname"`
	Address     string `json:"address"` // where other nodes reach it (MASTER_ADDR for distributed jobs)
	CPUs        int    `json:"cpus"`
	MemoryBytes int64  `json:"memory_bytes"`
	GPUs        []GPU  `json:"gpus,omitempty"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	Version     string `json:"version,omitempty"` // the agent's ferry version
}

// JoinRequest is an agent's first call.
type JoinRequest struct {
	Name  string `json:"name"` // the node name the provider was asked for
	Facts Facts  `json:"facts"`
}

// JoinReply admits a node.
type JoinReply struct {
	Node             string `json:"node"`       // the node's name in the workspace
	NodeToken        string `json:"node_token"` // secret: the agent's credential
	HeartbeatSeconds int    `json:"heartbeat_seconds"`
	LeaseSeconds     int    `json:"lease_seconds"`
	// Setup are scripts the node runs, in order, before it takes work: a
	// compute instance's creation_script (once, when it is made) and
	// startup_script (at every start). The agent reports how they went in
	// its heartbeats (Heartbeat.Setup).
	Setup []SetupScript `json:"setup,omitempty"`
}

// SetupScript is one setup script: Content (a script file's text, run with
// bash and Command as its arguments) or Command alone (a bash command line).
type SetupScript struct {
	Name           string `json:"name"` // creation_script or startup_script
	Content        string `json:"content,omitempty"`
	Command        string `json:"command,omitempty"`
	TimeoutSeconds int    `json:"timeout_seconds"`
}

// SetupResult is how a node's setup scripts went.
type SetupResult struct {
	OK       bool   `json:"ok"`
	Script   string `json:"script,omitempty"` // the one that failed
	ExitCode int    `json:"exit_code,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	Output   string `json:"output,omitempty"` // the end of the failed script's output
}

// Running is one attempt an agent has running.
type Running struct {
	Job     string `json:"job"`
	Attempt int    `json:"attempt"`
	Rank    int    `json:"rank"` // node rank within the job
}

// Heartbeat renews a node's lease and tells the server what runs there,
// so that after an outage the two agree again.
type Heartbeat struct {
	Running []Running `json:"running"`
	// Setup is set once the setup scripts of JoinReply.Setup have ended.
	Setup *SetupResult `json:"setup,omitempty"`
}

// HeartbeatReply says what the server wants of the node.
type HeartbeatReply struct {
	// Drain asks the agent to take no new work; when nothing runs, it exits.
	Drain bool `json:"drain,omitempty"`
	// Stop lists attempts the server no longer wants (canceled, lost, or
	// superseded): the agent stops their runners.
	Stop []Running `json:"stop,omitempty"`
}

// Assignment is one attempt of a job for this node to run: the agent starts
// `ferry runner` for it, as the local target does, with the run token in
// the runner's environment and the variables in Env added to the job's.
type Assignment struct {
	Job      string `json:"job"`
	Attempt  int    `json:"attempt"`
	Rank     int    `json:"rank"` // this node's rank among the job's nodes (NODE_RANK)
	APIURL   string `json:"api_url"`
	RunToken string `json:"run_token"` // secret
	// GPUs are the node's GPU indices this attempt gets (CUDA_VISIBLE_DEVICES).
	GPUs []int `json:"gpus,omitempty"`
	// Env are variables the job gets on this node: distribution variables
	// (MASTER_ADDR, WORLD_SIZE, NODE_RANK ...) and the like.
	Env map[string]string `json:"env,omitempty"`
}

// SessionRequest asks the agent to serve a session of its instance
// (`ferry compute exec|ssh|port-forward`): it calls the node's session
// route for ID with an upgrade and serves SSH on the connection.
type SessionRequest struct {
	ID   string `json:"id"`
	Kind string `json:"kind"` // exec | shell | forward
	// AuthorizedKeys are the instance's ssh_settings.ssh_key_value, one
	// public key per entry: when there are any, the client must log in
	// with one of them.
	AuthorizedKeys []string `json:"authorized_keys,omitempty"`
}

// Assignments is the answer to a poll.
type Assignments struct {
	Assignments []Assignment `json:"assignments"`
	// Sessions are sessions waiting for the agent to connect.
	Sessions []SessionRequest `json:"sessions,omitempty"`
}
