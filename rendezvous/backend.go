package rendezvous

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// Backend is one kind of rendezvous: torchrun's static, tcp (c10d) and etcd, and the world of one. It says what it
// asks of its caller and what it promises, so that a caller decides by asking it, never by its name. Lookup finds
// one by name; New opens the one Config.Backend names.
type Backend interface {
	// Solo reports whether the backend is the world of one: this node alone, known before any join, with no other
	// node and no store. Every join agrees at once, the barrier is open, the exchange returns what this node
	// published, and no other node can fail.
	Solo() bool
	// Elastic reports whether the backend forms its world from the nodes that arrive: it assigns their ranks, a
	// world may have MinNodes..NNodes nodes, and a node that comes late, comes back or replaces one joins with
	// LatestGeneration and waits for the world to restart. A backend that is not elastic has a fixed world that
	// its caller lays out: the node count and each node's rank (static: and node 0's endpoint, torchrun's
	// --master-addr) come with the launch or the host list, and every node joins generation 0.
	Elastic() bool
	// NeedsHosts reports whether cfg leaves to the job's host list (Config.Hosts) something the backend needs:
	// static, this node's rank when it is not given, or node 0's endpoint; tcp, node 0's endpoint for a world of
	// several nodes without one.
	NeedsHosts(cfg *Config) bool

	// namesNodes reports whether, under cfg, Join names a member without a host after its entry in the host list
	// (static without an endpoint).
	namesNodes(cfg *Config) bool
	// hostsServer reports whether the nodes meet on the embedded server (static, tcp), whose token is theirs.
	hostsServer() bool
	// port is the port an endpoint given without one gets.
	port() int
	// open prepares the backend for r (its Config and logger). linger: how long a closed job stays learnable
	// after its last node (the hosted server waits for connected nodes that long at most; etcd keeps the job's
	// keys that long).
	open(ctx context.Context, r *Rendezvous, linger time.Duration) error
}

// store is an open backend: what a Rendezvous enters each generation through.
type store interface {
	join(ctx context.Context, m Member, log *zap.Logger) (Session, error)
	close() error
}

// backends are the backends by name, torchrun's aliases included; "" is the world of one.
var backends = map[string]Backend{
	"":            soloBackend{},
	BackendStatic: staticBackend{},
	BackendTCP:    tcpBackend{},
	"c10d":        tcpBackend{},
	BackendEtcd:   etcdBackend{},
	"etcd-v2":     etcdBackend{},
}

// Lookup is the backend named name: BackendStatic, BackendTCP (alias "c10d"), BackendEtcd (alias "etcd-v2"), or
// "" for the world of one. An unknown name is an *Error matching ErrConfig with Field FieldBackend.
func Lookup(name string) (Backend, error) {
	if b, ok := backends[name]; ok {
		return b, nil
	}
	return nil, configError(FieldBackend, name, "unknown; use static, tcp or etcd")
}
