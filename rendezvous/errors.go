package rendezvous

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinels callers branch on with errors.Is. Every error the package returns for one of these conditions is an
// *Error whose Kind is the sentinel and whose Nodes name the nodes concerned.
var (
	// ErrTimeout: the rendezvous (join, barrier, gather) did not complete in time.
	ErrTimeout = errors.New("rendezvous timed out")
	// ErrMissingNodes: nodes never arrived before the timeout; Nodes lists them. It also matches ErrTimeout.
	ErrMissingNodes = errors.New("nodes never arrived")
	// ErrDuplicateNode: a different instance claims the identity (host) or rank of a live node; Nodes holds both.
	ErrDuplicateNode = errors.New("duplicate node")
	// ErrMismatch: nodes disagree on accelerator type, workers per node, node count or run id; Nodes names the odd ones.
	ErrMismatch = errors.New("nodes disagree")
	// ErrBadToken: the server refused the token of a message.
	ErrBadToken = errors.New("rendezvous token refused")
	// ErrNoToken: a server asked to listen off loopback without a token.
	ErrNoToken = errors.New("rendezvous token required off loopback")
	// ErrNodeLost: a node of the world failed or disappeared (connection dropped, heartbeat missed, lease expired).
	ErrNodeLost = errors.New("node lost")
	// ErrServerLost: the rendezvous server (or etcd) stopped answering.
	ErrServerLost = errors.New("rendezvous server lost")
	// ErrWorldFull: the generation already has all its nodes and the joiner is not one of them.
	ErrWorldFull = errors.New("rendezvous world already complete")
	// ErrProtocol: a message was malformed, oversized, of an unknown version or type.
	ErrProtocol = errors.New("rendezvous protocol error")
	// ErrConfig: the configuration or the environment holds a bad value.
	ErrConfig = errors.New("bad rendezvous configuration")
	// ErrClosed: the session or rendezvous was closed.
	ErrClosed = errors.New("rendezvous closed")
)

var kinds = map[string]error{
	"timeout": ErrTimeout, "missing": ErrMissingNodes, "duplicate": ErrDuplicateNode, "mismatch": ErrMismatch,
	"bad_token": ErrBadToken, "no_token": ErrNoToken, "node_lost": ErrNodeLost, "server_lost": ErrServerLost,
	"world_full": ErrWorldFull, "protocol": ErrProtocol, "config": ErrConfig, "closed": ErrClosed,
}

// NodeRef names one node in an error or a failure. Rank is -1 when the node has no rank yet.
type NodeRef struct {
	Rank     int    `json:"rank"`
	Host     string `json:"host,omitempty"`
	Instance string `json:"instance,omitempty"`
}

func (n NodeRef) String() string {
	var b strings.Builder
	if n.Rank >= 0 {
		fmt.Fprintf(&b, "node rank %d", n.Rank)
	} else {
		b.WriteString("node")
	}
	if n.Host != "" {
		fmt.Fprintf(&b, " host %q", n.Host)
	}
	if n.Instance != "" {
		fmt.Fprintf(&b, " instance %s", n.Instance)
	}
	return b.String()
}

// Error is the typed error of the package: the condition (Kind, one of the sentinels), the nodes concerned and
// the details in words.
type Error struct {
	Kind   error
	Nodes  []NodeRef
	Detail string
}

func (e *Error) Error() string {
	var b strings.Builder
	kind := e.Kind.Error()
	if !strings.Contains(kind, "rendezvous") { // "rendezvous: rendezvous timed out" says it twice
		b.WriteString("rendezvous: ")
	}
	b.WriteString(kind)
	if len(e.Nodes) > 0 {
		b.WriteString(" (")
		for i, n := range e.Nodes {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(n.String())
		}
		b.WriteString(")")
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns the sentinel; a missing-nodes error also matches ErrTimeout.
func (e *Error) Unwrap() []error {
	if e.Kind == ErrMissingNodes {
		return []error{ErrMissingNodes, ErrTimeout}
	}
	return []error{e.Kind}
}

func newError(kind error, detail string, nodes ...NodeRef) *Error {
	return &Error{Kind: kind, Nodes: nodes, Detail: detail}
}

// wireError is the form of an *Error on the wire.
type wireError struct {
	Code   string    `json:"code"`
	Nodes  []NodeRef `json:"nodes,omitempty"`
	Detail string    `json:"detail,omitempty"`
}

func toWire(err error) *wireError {
	var e *Error
	if errors.As(err, &e) {
		for code, k := range kinds {
			if k == e.Kind {
				return &wireError{Code: code, Nodes: e.Nodes, Detail: e.Detail}
			}
		}
		return &wireError{Code: "protocol", Nodes: e.Nodes, Detail: e.Error()}
	}
	return &wireError{Code: "protocol", Detail: err.Error()}
}

func (w *wireError) err() error {
	k, ok := kinds[w.Code]
	if !ok {
		return newError(ErrProtocol, fmt.Sprintf("server sent unknown error code %q: %s", w.Code, w.Detail), w.Nodes...)
	}
	return &Error{Kind: k, Nodes: w.Nodes, Detail: w.Detail}
}
