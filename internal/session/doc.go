// Package session is what `ferry compute exec`, `ferry compute ssh` and
// `ferry compute port-forward` speak with the node agent of a compute
// instance, over a byte stream the Ferry server splices together from two
// HTTP upgrades: the user's (authenticated by their API token) and the
// agent's (authenticated by its node token, dialled out from the node, so
// the machine needs no inbound port).
//
// The stream carries SSH (golang.org/x/crypto/ssh), with the agent as the
// server. The stream is already authenticated at both ends by the Ferry
// server, so SSH is not here for its security: it is here because it is a
// finished, well-tested multiplexing protocol with exactly the parts a
// remote shell needs — several channels on one stream with flow control,
// exec with stdin/stdout/stderr and an exit status (or the signal that
// killed the command), pseudo-terminals with their size and later resizes,
// environment requests, and TCP forwarding (direct-tcpip). Anything of our
// own would have to invent each of those. Because the stream is trusted,
// the host key is an ephemeral one made per session and the client does
// not check it; client authentication is off unless the instance names
// public keys (ssh_settings.ssh_key_value), in which case the client must
// prove it holds one of their private keys as well.
//
// Serve is the agent's side; NewClient, Exec, Shell and Forward the CLI's.
// DialHTTP makes the HTTP upgrade both sides use to reach the server.
package session
