// Package tcp is torchrun's c10d rendezvous ("tcp", alias "c10d"): an elastic world met on an embedded server
// that one node hosts. It owns the server (server.go, conn.go, world.go), its client (client.go, tcp.go), the wire
// format (wire.go), the HMAC handshake (handshake.go), liveness and lag (live.go, lag.go) and the retry of an
// endpoint whose name does not resolve yet (resolve.go). The static backend (package static) meets on the same
// server through Store. The agreement itself (ranks, checks, shares) is the rendezvous package's; the protocol is
// described in its doc. The package registers itself; the launcher imports it (internal/host/host.go).
package tcp
