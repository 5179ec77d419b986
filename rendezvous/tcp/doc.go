// Package tcp is torchrun's c10d rendezvous ("tcp", alias "c10d"): an elastic world met on an embedded server
// that one node hosts. It offers the server (Server: its connections, the worlds of each generation, barriers,
// published data and failures), its client, the wire format and the HMAC handshake, the liveness of both sides
// and the retry of an endpoint whose name does not resolve yet. The static backend (package static) meets on the
// same server through Store. It does not own the agreement itself (ranks, checks, shares: the kit the rendezvous
// backends share) nor the API a program calls (package rendezvous, whose doc describes the protocol). The package
// registers itself when a program imports it.
package tcp
