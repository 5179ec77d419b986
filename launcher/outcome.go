package launcher

import (
	"context"
	"encoding/json"
	"fmt"

	"tpurun/launcher/results"
	"tpurun/rendezvous"
)

// outcome is what each node publishes when its workers are gone: the world-wide verdict is computed from them.
type outcome struct {
	Node    int            `json:"node"`
	Code    int            `json:"code"`
	Origin  bool           `json:"origin"` // this node's own worker failed (it was not stopped by another node)
	Rank    int            `json:"rank"`   // global rank of the failed worker, -1 when none
	Error   string         `json:"error,omitempty"`
	Results *results.Share `json:"results,omitempty"` // this node's workers, results and violations (node 0 merges them)
	Exits   []rankEnd      `json:"exits,omitempty"`   // how this node's workers ended (node 0 builds the document)
}

// rankEnd is how one worker of another node ended, for node 0's results document.
type rankEnd struct {
	Rank     int `json:"rank"`
	PID      int `json:"pid"`
	ExitCode int `json:"exit_code"`
	Signal   int `json:"signal,omitempty"`
}

// remoteStop is the cause of a run stopped because another node failed or vanished.
type remoteStop struct{ f rendezvous.Failure }

func (e *remoteStop) Error() string { return "stopped because another node failed: " + e.f.String() }

// verdict picks the world's exit code from every node's outcome: the code of the lowest node whose own worker
// failed, else the first non-zero code by node rank, else 0.
func verdict(all []outcome) (outcome, bool) {
	for _, o := range all {
		if o.Origin && o.Code != 0 {
			return o, true
		}
	}
	for _, o := range all {
		if o.Code != 0 {
			return o, true
		}
	}
	return outcome{}, false
}

// publishGather publishes this node's outcome and returns every node's, in node-rank order.
func publishGather(ctx context.Context, s session, key string, mine outcome) ([]outcome, error) {
	b, err := json.Marshal(mine)
	if err != nil {
		return nil, err
	}
	if err := s.Publish(ctx, key, b); err != nil {
		return nil, err
	}
	got, err := s.Gather(ctx, key)
	if err != nil {
		return nil, err
	}
	all := make([]outcome, 0, len(got))
	for n := 0; n < len(got); n++ {
		var oc outcome
		if err := json.Unmarshal(got[n], &oc); err != nil {
			return nil, fmt.Errorf("%s of node %d: %w", key, n, err)
		}
		oc.Node = n
		all = append(all, oc)
	}
	return all, nil
}
