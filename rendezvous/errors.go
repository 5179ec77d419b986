package rendezvous

import (
	"errors"
	"fmt"
	"strings"

	"tpurun/internal/failure"
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
	// "rendezvous endpoint", Value) and says how long it was tried. It also matches ErrTimeout.
	ErrUnresolved = errors.New("rendezvous endpoint does not resolve")
	// ErrDuplicateNode: a different instance claims the identity (host) or rank of a live node; Nodes holds both.
	ErrDuplicateNode = errors.New("duplicate node")
	// ErrMismatch: nodes disagree on a setting every node must share (node count, run id, accelerator type,
	// workers per node, number of slices): a *MismatchError names the setting, each value and who gave it.
	ErrMismatch = errors.New("nodes disagree")
	// ErrBadToken: the server refused this node's token, or the server could not prove it holds the same token.
	ErrBadToken = errors.New("rendezvous token refused")
	// ErrNoToken: a server would listen, or a node would connect, off loopback without a token. It also matches
	// ErrConfig (and tpurun exits 2 on it).
	ErrNoToken = configKind("rendezvous token required off loopback")
	// ErrNodeLost: a node of the world failed or disappeared (connection dropped, heartbeat missed, lease expired).
	ErrNodeLost = errors.New("node lost")
	// ErrStoreLost: the rendezvous store stopped answering: the embedded server (node 0 gone?) or etcd (a lease
	// that could not be kept alive, a watch that broke). Such an error is an *Error whose Field is
	// "rendezvous endpoint" and Value the endpoint; Session.Done is closed and Session.Err returns it.
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
	// ErrConfig: the configuration or the environment holds a bad value; Error.Field names the setting. It matches
	// every configuration error of tpurun (exit 2), as every error of this kind does.
	ErrConfig = configKind("bad rendezvous configuration")
	// ErrClosed: the session or rendezvous was closed.
	ErrClosed = errors.New("rendezvous closed")
)

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
// configuration error the setting at fault (Field) and its Value, for a lost store its endpoint (Field "rendezvous
// endpoint"), and the details in words. Its message names the setting by the rendezvous's word for it
// ("endpoint"): it says "rendezvous" already.
type Error struct {
	Kind  error
	Nodes []NodeRef
	// Field names the setting: "rendezvous backend", "rendezvous endpoint", "rendezvous run id", "rendezvous node
	// count", "rendezvous minimum node count", "rendezvous node rank", "rendezvous option" (a key=value of
	// Config.Conf), "rendezvous token", "rendezvous listen address", "rendezvous host name", "rendezvous host
	// list", or a name of its own (a member's "instance"); "" for an error about no setting.
	Field  string
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
		b.WriteString(failure.Named(e.Field).Word())
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

// configKind is a sentinel of a mistake in the configuration: it matches tpurun's one configuration category, which
// exits 2.
func configKind(msg string) error { return failure.NewConfigKind(msg) }

// SettingName is the setting the error is about: Field ("" for an error that names none), for whoever reports the
// error to name the flag or key that sets it.
func (e *Error) SettingName() string { return e.Field }

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

// newError is an *Error of kind (one of the sentinels).
func newError(kind error, detail string) *Error { return &Error{Kind: kind, Detail: detail} }

// configError is an ErrConfig error naming the setting at fault and its value.
func configError(field failure.Setting, value, detail string) *Error {
	return &Error{Kind: ErrConfig, Field: string(field), Value: value, Detail: detail}
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
