package rendezvous

import (
	"errors"
	"fmt"
	"strings"

	"tpurun/internal/setting"
)

// Sentinels callers branch on with errors.Is. Every error the package returns for one of these conditions is an
// *Error whose Kind is the sentinel and whose Nodes name the nodes concerned, except a lost node during a call,
// which is a *NodeLostError (matching ErrNodeLost).
var (
	// ErrTimeout: the rendezvous (join, barrier, gather) did not complete in time.
	ErrTimeout = errors.New("rendezvous timed out")
	// ErrMissingNodes: nodes never arrived before the timeout; Nodes lists them. It also matches ErrTimeout.
	ErrMissingNodes = errors.New("nodes never arrived")
	// ErrUnresolved: the endpoint's host name did not resolve within the join timeout (it was retried until then:
	// a pod is published in its headless service only as it starts). The *Error names the endpoint (Field
	// setting.RendezvousEndpoint, Value) and says how long it was tried. It also matches ErrTimeout.
	ErrUnresolved = errors.New("rendezvous endpoint does not resolve")
	// ErrDuplicateNode: a different instance claims the identity (host) or rank of a live node; Nodes holds both.
	ErrDuplicateNode = errors.New("duplicate node")
	// ErrMismatch: nodes disagree on a setting every node must share (node count, run id, accelerator type,
	// workers per node, number of slices): a *MismatchError names the setting, each value and who gave it.
	ErrMismatch = errors.New("nodes disagree")
	// ErrBadToken: the server refused this node's token, or the server could not prove it holds the same token.
	ErrBadToken = errors.New("rendezvous token refused")
	// ErrNoToken: a server would listen, or a node would connect, off loopback without a token. It also matches
	// ErrConfig.
	ErrNoToken error = &usageError{"rendezvous token required off loopback"}
	// ErrNodeLost: a node of the world failed or disappeared (connection dropped, heartbeat missed, lease expired).
	ErrNodeLost = errors.New("node lost")
	// ErrStoreLost: the rendezvous store stopped answering: the embedded server (node 0 gone?) or etcd (a lease
	// that could not be kept alive, a watch that broke). Such an error is an *Error whose Field is
	// setting.RendezvousEndpoint and Value the endpoint; Session.Done is closed and Session.Err returns it.
	ErrStoreLost = errors.New("rendezvous store lost")
	// ErrServerLost is the older name of ErrStoreLost (the same error).
	ErrServerLost = ErrStoreLost
	// ErrJobClosed: the job under this run id has finished (see the package doc's lifecycle). The error is a
	// *JobClosedError naming the run id, the last generation and the job's exit code.
	ErrJobClosed = errors.New("job already finished")
	// ErrWorldFull: the generation already has all its nodes and the joiner is not one of them.
	ErrWorldFull = errors.New("rendezvous world already complete")
	// ErrProtocol: a message was malformed, oversized, of an unknown version or type.
	ErrProtocol = errors.New("rendezvous protocol error")
	// ErrVersion: the other side speaks another version of the wire protocol (another tpurun build). It also
	// matches ErrProtocol.
	ErrVersion = errors.New("rendezvous protocol version mismatch")
	// ErrConfig: the configuration or the environment holds a bad value; Error.Field names the setting.
	ErrConfig error = &usageError{"bad rendezvous configuration"}
	// ErrClosed: the session or rendezvous was closed.
	ErrClosed = errors.New("rendezvous closed")
)

// usageError is a sentinel of a mistake in the configuration (ErrConfig, ErrNoToken): its Usage method says so
// to whoever maps errors to exit codes (tpurun exits 2 on it), without this package naming the codes.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// Usage marks the error as a usage or configuration error.
func (e *usageError) Usage() bool { return true }

var kinds = map[string]error{
	"timeout": ErrTimeout, "missing": ErrMissingNodes, "duplicate": ErrDuplicateNode, "mismatch": ErrMismatch,
	"bad_token": ErrBadToken, "no_token": ErrNoToken, "node_lost": ErrNodeLost, "server_lost": ErrServerLost,
	"world_full": ErrWorldFull, "protocol": ErrProtocol, "version": ErrVersion, "config": ErrConfig, "closed": ErrClosed,
	"job_closed": ErrJobClosed,
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

// Error is the typed error of the package: the condition (Kind, one of the sentinels), the nodes concerned, for a
// configuration error the setting at fault (Field, one of package setting's Rendezvous constants, and its Value),
// for a lost store its endpoint (Field setting.RendezvousEndpoint), and the details in words. Its message names
// the setting by the rendezvous's word for it ("endpoint"): it says "rendezvous" already.
type Error struct {
	Kind   error
	Nodes  []NodeRef
	Field  setting.Setting
	Value  string
	Detail string
}

// maxShown bounds how much of a bad value an error message repeats.
const maxShown = 64

// quote quotes v for an error message, shortened when it is long.
func quote(v string) string {
	if len(v) <= maxShown {
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprintf("%q... (%d bytes)", v[:maxShown], len(v))
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
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field.Word())
		if e.Value != "" {
			b.WriteString(" ")
			b.WriteString(quote(e.Value))
		}
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Setting is the setting the error is about: Field ("" for an error that names none).
func (e *Error) Setting() setting.Setting { return e.Field }

// Unwrap returns the sentinel; a missing-nodes or unresolved error also matches ErrTimeout, a no-token error
// ErrConfig and a version error ErrProtocol.
func (e *Error) Unwrap() []error {
	switch e.Kind {
	case ErrMissingNodes:
		return []error{ErrMissingNodes, ErrTimeout}
	case ErrUnresolved:
		return []error{ErrUnresolved, ErrTimeout}
	case ErrNoToken:
		return []error{ErrNoToken, ErrConfig}
	case ErrVersion:
		return []error{ErrVersion, ErrProtocol}
	}
	return []error{e.Kind}
}

// NewError is an *Error of kind (one of the sentinels) about nodes: for backends, whose errors are the package's.
func NewError(kind error, detail string, nodes ...NodeRef) *Error {
	return &Error{Kind: kind, Nodes: nodes, Detail: detail}
}

// StoreLost is an ErrStoreLost error naming the store's endpoint.
func StoreLost(endpoint, detail string, nodes ...NodeRef) *Error {
	return &Error{Kind: ErrStoreLost, Nodes: nodes, Field: setting.RendezvousEndpoint, Value: endpoint, Detail: detail}
}

// ConfigError is an ErrConfig error naming the setting at fault and its value.
func ConfigError(field setting.Setting, value, detail string) *Error {
	return &Error{Kind: ErrConfig, Field: field, Value: value, Detail: detail}
}

// NodeLostError is a call (a barrier, a gather) that cannot complete because a node of the world is gone: its
// launcher died, its host went down, its connection or its etcd lease lapsed, or it left. errors.Is(err,
// ErrNodeLost) holds. An elastic launcher restarts the world without it as generation Generation+1.
type NodeLostError struct {
	Node       NodeRef
	Generation int
	Detail     string
}

func (e *NodeLostError) Error() string {
	s := fmt.Sprintf("rendezvous: %s lost in generation %d", e.Node, e.Generation)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is makes errors.Is(err, ErrNodeLost) true.
func (e *NodeLostError) Is(target error) bool { return target == ErrNodeLost }

// WireError is the form of an error on the wire (the tcp backend's messages) and in a store (etcd's world): for
// backends. ToWire makes one of an error of the package, Err the error again.
type WireError struct {
	Code       string         `json:"code"`
	Nodes      []NodeRef      `json:"nodes,omitempty"`
	Field      string         `json:"field,omitempty"`
	Value      string         `json:"value,omitempty"`
	Generation int            `json:"generation,omitempty"`
	RunID      string         `json:"run_id,omitempty"`    // job_closed
	ExitCode   int            `json:"exit_code,omitempty"` // job_closed
	Values     []SettingValue `json:"values,omitempty"`    // mismatch: each value and who gave it
	Detail     string         `json:"detail,omitempty"`
}

func ToWire(err error) *WireError {
	var lost *NodeLostError
	var closed *JobClosedError
	var mm *MismatchError
	var e *Error
	switch {
	case errors.As(err, &lost):
		return &WireError{Code: "node_lost", Nodes: []NodeRef{lost.Node}, Generation: lost.Generation, Detail: lost.Detail}
	case errors.As(err, &closed):
		return &WireError{Code: "job_closed", RunID: closed.RunID, Generation: closed.Generation, ExitCode: closed.ExitCode}
	case errors.As(err, &mm):
		return &WireError{Code: "mismatch", Field: mm.Setting, Generation: mm.Generation, Values: mm.Values, Detail: mm.Hint}
	case errors.As(err, &e):
		for code, k := range kinds {
			if k == e.Kind {
				return &WireError{Code: code, Nodes: e.Nodes, Field: string(e.Field), Value: e.Value, Detail: e.Detail}
			}
		}
		return &WireError{Code: "protocol", Nodes: e.Nodes, Detail: e.Error()}
	}
	return &WireError{Code: "protocol", Detail: err.Error()}
}

func (w *WireError) Err() error {
	k, ok := kinds[w.Code]
	switch {
	case !ok:
		return NewError(ErrProtocol, fmt.Sprintf("server sent unknown error code %q: %s", w.Code, w.Detail), w.Nodes...)
	case k == ErrNodeLost && len(w.Nodes) == 1:
		return &NodeLostError{Node: w.Nodes[0], Generation: w.Generation, Detail: w.Detail}
	case k == ErrJobClosed:
		return &JobClosedError{RunID: w.RunID, Generation: w.Generation, ExitCode: w.ExitCode}
	case k == ErrMismatch && len(w.Values) > 1:
		return &MismatchError{Setting: w.Field, Generation: w.Generation, Values: w.Values, Hint: w.Detail}
	}
	return &Error{Kind: k, Nodes: w.Nodes, Field: setting.Named(w.Field), Value: w.Value, Detail: w.Detail} // as the other side named it
}
