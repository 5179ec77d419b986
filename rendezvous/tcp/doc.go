// Package tcp is torchrun's c10d rendezvous ("tcp", alias "c10d"): an elastic world met on an embedded server
// that one node hosts. It offers the server (Listen, Server: authenticated connections, one world per generation
// with its barriers, gathers and failures, and the loss of a node whose connection drops or goes silent), the
// client every node talks to it with (Store, NewStore, HostedServer), and their wire protocol (Version). The static
// backend (package static) meets on the same server through Store.
//
// It does not own the agreement itself (ranks, checks, shares: package rendezvous, whose doc describes the
// protocol), nor the choice of a backend: the package registers itself under Name, and the launcher imports it for
// that side effect.
package tcp
