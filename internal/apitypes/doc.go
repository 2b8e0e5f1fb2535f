// Package apitypes holds the wire types of Ferry's REST API: jobs and
// their reports, computes and nodes, assets, endpoints, the requests the
// API takes and the problems it answers. The server's domain
// (internal/workspace) speaks them and everything that talks to a server
// (the client, the runner, the executor, the studio, the command line)
// imports them instead of the domain, so a job's runner links none of the
// server's code and a change of the protocol is a change of this package.
//
// It is a leaf: it imports only the job file's types (internal/spec), the
// resolved environment (internal/environment) and a node's facts
// (internal/nodeproto); internal/archtest holds it to that.
package apitypes
