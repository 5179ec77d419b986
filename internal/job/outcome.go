package job

import (
	"context"
	"encoding/json"
	"fmt"

	"tpurun/internal/results"
	"tpurun/internal/stop"
	"tpurun/rendezvous"
)

// outcome is what each node publishes when its workers are gone: the world-wide verdict is computed from them.
type outcome struct {
	Node int `json:"node"`
	// Verdict is how this node's attempt ended (in "outcome"), or the world's verdict as node 0 decided it, with
	// the code every node exits with (in "final").
	Verdict stop.Verdict       `json:"verdict"`
	Results *results.Share     `json:"results,omitempty"` // this node's workers, results and violations (node 0 merges them)
	Exits   []results.RankExit `json:"exits,omitempty"`   // how this node's workers ended (node 0 builds the document)
	// WantDocument: this node's caller wants the results document (--json, --results); node 0 then puts the
	// world's document in its final outcome, and only then.
	WantDocument bool              `json:"want_document,omitempty"`
	Document     *results.Document `json:"document,omitempty"`
}

// published is v as another node reads it: its words instead of its error.
func published(v *stop.Verdict) stop.Verdict {
	p := *v
	if p.Message == "" && p.Code != 0 {
		p.Message = v.Summary()
	}
	p.Err = nil
	return p
}

// worldVerdict picks the world's verdict from every node's outcome: the lowest node whose own cause ended its
// attempt with a non-zero code, else the first non-zero code by node rank; failed is false when every node
// succeeded.
func worldVerdict(all []outcome) (v stop.Verdict, failed bool) {
	pick := -1
	for i, o := range all {
		if o.Verdict.Code != 0 && (pick < 0 || o.Verdict.Reason.Own() && !all[pick].Verdict.Reason.Own()) {
			pick = i
		}
	}
	if pick < 0 {
		return stop.Verdict{Reason: stop.Done}, false
	}
	v = all[pick].Verdict
	v.Node = all[pick].Node
	return v, true
}

// publishGather publishes this node's outcome and returns every node's, in node-rank order, through
// rendezvous.GatherAll: any results document node 0 can write (every result up to --max-result-bytes) crosses the
// rendezvous whatever its message limit.
func publishGather(ctx context.Context, s rendezvous.Session, key string, mine outcome, nodes int) ([]outcome, error) {
	b, err := json.Marshal(mine)
	if err != nil {
		return nil, err
	}
	bufs, err := rendezvous.GatherAll(ctx, s, key, b, nodes)
	if err != nil {
		return nil, err
	}
	all := make([]outcome, len(bufs))
	for n, buf := range bufs {
		if err := json.Unmarshal(buf, &all[n]); err != nil {
			return nil, fmt.Errorf("%s of node %d: %w", key, n, err)
		}
		all[n].Node = n
	}
	return all, nil
}
