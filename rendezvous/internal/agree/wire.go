package agree

import (
	"errors"
	"fmt"

	"tpurun/rendezvous"
)

// kinds are the codes of the sentinels on the wire.
var kinds = map[string]error{
	"timeout": rendezvous.ErrTimeout, "missing": rendezvous.ErrMissingNodes, "duplicate": rendezvous.ErrDuplicateNode, "mismatch": rendezvous.ErrMismatch,
	"bad_token": rendezvous.ErrBadToken, "no_token": rendezvous.ErrNoToken, "node_lost": rendezvous.ErrNodeLost, "server_lost": rendezvous.ErrServerLost,
	"world_full": rendezvous.ErrWorldFull, "protocol": rendezvous.ErrProtocol, "version": rendezvous.ErrVersion, "config": rendezvous.ErrConfig, "closed": rendezvous.ErrClosed,
	"job_closed": rendezvous.ErrJobClosed,
}

// WireError is the form of an error of package rendezvous on the wire (the tcp backend's messages) and in a store
// (etcd's world). ToWire makes one of an error, Err the error again.
type WireError struct {
	Code       string                    `json:"code"`
	Nodes      []rendezvous.NodeRef      `json:"nodes,omitempty"`
	Field      string                    `json:"field,omitempty"`
	Value      string                    `json:"value,omitempty"`
	Generation int                       `json:"generation,omitempty"`
	RunID      string                    `json:"run_id,omitempty"`    // job_closed
	ExitCode   int                       `json:"exit_code,omitempty"` // job_closed
	Values     []rendezvous.SettingValue `json:"values,omitempty"`    // mismatch: each value and who gave it
	Detail     string                    `json:"detail,omitempty"`
}

// ToWire is err as it travels: its code (the sentinel it matches), the nodes, setting and value it names, and its
// details; an error of no known kind travels as a protocol error with its words.
func ToWire(err error) *WireError {
	var lost *rendezvous.NodeLostError
	var closed *rendezvous.JobClosedError
	var mm *rendezvous.MismatchError
	var e *rendezvous.Error
	switch {
	case errors.As(err, &lost):
		return &WireError{Code: "node_lost", Nodes: []rendezvous.NodeRef{lost.Node}, Generation: lost.Generation, Detail: lost.Detail}
	case errors.As(err, &closed):
		return &WireError{Code: "job_closed", RunID: closed.RunID, Generation: closed.Generation, ExitCode: closed.ExitCode}
	case errors.As(err, &mm):
		return &WireError{Code: "mismatch", Field: mm.Setting, Generation: mm.Generation, Values: mm.Values, Detail: mm.Hint}
	case errors.As(err, &e):
		for code, k := range kinds {
			if k == e.Kind {
				return &WireError{Code: code, Nodes: e.Nodes, Field: e.Field, Value: e.Value, Detail: e.Detail}
			}
		}
		return &WireError{Code: "protocol", Nodes: e.Nodes, Detail: e.Error()}
	}
	return &WireError{Code: "protocol", Detail: err.Error()}
}

// Err is the error w carries, of the type it had: a *NodeLostError, *JobClosedError, *MismatchError, else an
// *Error of its kind; an unknown code is an ErrProtocol error.
func (w *WireError) Err() error {
	k, ok := kinds[w.Code]
	switch {
	case !ok:
		return NewError(rendezvous.ErrProtocol, fmt.Sprintf("server sent unknown error code %q: %s", w.Code, w.Detail), w.Nodes...)
	case k == rendezvous.ErrNodeLost && len(w.Nodes) == 1:
		return &rendezvous.NodeLostError{Node: w.Nodes[0], Generation: w.Generation, Detail: w.Detail}
	case k == rendezvous.ErrJobClosed:
		return &rendezvous.JobClosedError{RunID: w.RunID, Generation: w.Generation, ExitCode: w.ExitCode}
	case k == rendezvous.ErrMismatch && len(w.Values) > 1:
		return &rendezvous.MismatchError{Setting: w.Field, Generation: w.Generation, Values: w.Values, Hint: w.Detail}
	}
	return &rendezvous.Error{Kind: k, Nodes: w.Nodes, Field: w.Field, Value: w.Value, Detail: w.Detail} // as the other side named it
}
