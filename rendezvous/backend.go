package rendezvous

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/failure"
)

// Backend is one kind of rendezvous: torchrun's static, tcp (c10d) and etcd, each a package under this one that
// registers itself (Register), and the world of one. It says what it asks of its caller and what it promises, so
// that a caller decides by asking it, never by its name. Lookup finds one by name; New opens the one Config.Backend
// names.
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

	// The methods below are for Rendezvous, not for its callers: they ask them of the Rendezvous.

	// NamesNodes reports whether, under cfg, Join names a member without a host after its entry in the host list
	// (static without an endpoint).
	NamesNodes(cfg *Config) bool
	// HostsServer reports whether the nodes meet on the embedded server (static, tcp), whose token is theirs.
	HostsServer() bool
	// Port is the port an endpoint given without one gets.
	Port() int
	// Open prepares the backend under cfg (which it may complete: a static world's node count) and returns the
	// store a Rendezvous joins through. linger: how long a closed job stays learnable after its last node (the
	// hosted server waits for connected nodes that long at most; etcd keeps the job's keys that long).
	Open(ctx context.Context, cfg *Config, log *zap.Logger, linger time.Duration) (Store, error)
}

// Store is an open backend: what a Rendezvous enters each generation through. A backend implements it; callers
// use Rendezvous.
type Store interface {
	// Join enters one generation with m, completed and checked by Rendezvous.Join.
	Join(ctx context.Context, m Member, log *zap.Logger) (Session, error)
	// Endpoint is the address of the server this node talks to (tcp, static), or the etcd endpoints.
	Endpoint() string
	// Hosts is the host list that names the nodes by rank, when the store has one (static).
	Hosts() []string
	// Close releases the store (see Rendezvous.Close).
	Close() error
}

// Registration is one backend as it registers itself: its name, torchrun's other names for it, and the backend.
type Registration struct {
	Name    string
	Aliases []string
	Backend Backend
}

var registry = struct {
	sync.RWMutex
	byName map[string]Backend // names and aliases; "" is the world of one
	list   []Registration     // sorted by Name
}{byName: map[string]Backend{"": soloBackend{}}}

// Register adds a backend under its name and aliases and returns it: each backend package registers itself in a
// package-level declaration (var _ = rendezvous.Register(...)), run when a program links it by importing the
// package. A name taken twice panics: a programming error.
func Register(r Registration) Backend {
	registry.Lock()
	defer registry.Unlock()
	names := append([]string{r.Name}, r.Aliases...)
	for _, n := range names {
		if _, dup := registry.byName[n]; dup {
			panic(fmt.Sprintf("rendezvous: backend %q registered twice", n))
		}
	}
	for _, n := range names {
		registry.byName[n] = r.Backend
	}
	r.Aliases = slices.Clone(r.Aliases)
	i, _ := slices.BinarySearchFunc(registry.list, r.Name, func(x Registration, n string) int { return strings.Compare(x.Name, n) })
	registry.list = slices.Insert(registry.list, i, r)
	return r.Backend
}

// Backends are the registered backends, by name.
func Backends() []Registration {
	registry.RLock()
	defer registry.RUnlock()
	return slices.Clone(registry.list)
}

// Names says the registered backends in words, for help text and messages: "etcd (etcd-v2), static or tcp (c10d)".
func Names() string {
	var names []string
	for _, r := range Backends() {
		n := r.Name
		if len(r.Aliases) > 0 {
			n += " (" + strings.Join(r.Aliases, ", ") + ")"
		}
		names = append(names, n)
	}
	switch len(names) {
	case 0:
		return "none"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Lookup is the backend named name, a registered name or alias (Backends), or "" for the world of one. An unknown
// name is an *Error matching ErrConfig with Field "rendezvous backend" whose message names the registered backends,
// and, for one of tpurun's backends that the program did not link, the package to import: `backend "tcp":
// unknown; import _ "tpurun/rendezvous/tcp" to register it (registered: none)`.
func Lookup(name string) (Backend, error) {
	registry.RLock()
	b, ok := registry.byName[name]
	registry.RUnlock()
	if ok {
		return b, nil
	}
	if pkg, ok := backendPackages[name]; ok {
		return nil, configError(failure.RendezvousBackend, name, fmt.Sprintf("unknown; import _ %q to register it (registered: %s)", pkg, Names()))
	}
	if len(Backends()) == 0 {
		return nil, configError(failure.RendezvousBackend, name, `unknown, and no backend is registered: import one (_ "tpurun/rendezvous/tcp", static or etcd)`)
	}
	return nil, configError(failure.RendezvousBackend, name, "unknown; use "+Names())
}

// backendPackages are tpurun's backends by their names and aliases: the package that registers each, which a
// program imports to link it.
var backendPackages = map[string]string{
	"static": "tpurun/rendezvous/static",
	"tcp":    "tpurun/rendezvous/tcp", "c10d": "tpurun/rendezvous/tcp",
	"etcd": "tpurun/rendezvous/etcd", "etcd-v2": "tpurun/rendezvous/etcd",
}
