package job

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

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
	for _, o := range all {
		if o.Verdict.Own() && o.Verdict.Code != 0 {
			v = o.Verdict
			v.Node = o.Node
			return v, true
		}
	}
	for _, o := range all {
		if o.Verdict.Code != 0 {
			v = o.Verdict
			v.Node = o.Node
			return v, true
		}
	}
	return stop.Verdict{Reason: stop.Done}, false
}

// publishGather publishes this node's outcome and returns every node's, in node-rank order. An outcome travels in
// pieces of at most pieceSize(nodes) bytes, one round per piece, so that any results document node 0 can write
// (every result up to --max-result-bytes) crosses the rendezvous whatever its message limit: a round's gather
// carries one piece of every node, which stays well under the TCP rendezvous's 4 MiB message and etcd's 1.5 MiB
// request. The first piece says how many follow.
func publishGather(ctx context.Context, s rendezvous.Session, key string, mine outcome, nodes int) ([]outcome, error) {
	b, err := json.Marshal(mine)
	if err != nil {
		return nil, err
	}
	size := pieceSize(nodes)
	pieces := max(1, (len(b)+size-1)/size)
	piece := func(i int) []byte {
		if i*size >= len(b) {
			return nil
		}
		return b[i*size : min(len(b), (i+1)*size)]
	}
	first := append(strconv.AppendInt(nil, int64(pieces), 10), '\n')
	got, err := exchange(ctx, s, key, append(first, piece(0)...))
	if err != nil {
		return nil, err
	}
	bufs := make([][]byte, len(got))
	rounds := 1
	for n := range got {
		head, rest, ok := bytes.Cut(got[n], []byte{'\n'})
		k, perr := strconv.Atoi(string(head))
		if !ok || perr != nil || k < 1 {
			return nil, fmt.Errorf("%s of node %d: not a piece count: %.20q", key, n, head)
		}
		bufs[n] = append(bufs[n], rest...)
		rounds = max(rounds, k)
	}
	for i := 1; i < rounds; i++ {
		more, err := exchange(ctx, s, key+"."+strconv.Itoa(i), piece(i))
		if err != nil {
			return nil, err
		}
		for n := range bufs {
			bufs[n] = append(bufs[n], more[n]...)
		}
	}
	all := make([]outcome, 0, len(bufs))
	for n, buf := range bufs {
		var oc outcome
		if err := json.Unmarshal(buf, &oc); err != nil {
			return nil, fmt.Errorf("%s of node %d: %w", key, n, err)
		}
		oc.Node = n
		all = append(all, oc)
	}
	return all, nil
}

// pieceSize is how many bytes of an outcome one round carries per node: a round's gather holds every node's
// piece (base64 in the TCP rendezvous's JSON frames: 4/3 of it), within 1 MiB in all.
func pieceSize(nodes int) int {
	return max(16<<10, min(512<<10, (1<<20)/max(1, nodes)))
}

// exchange publishes data under key and gathers every node's, in node-rank order.
func exchange(ctx context.Context, s rendezvous.Session, key string, data []byte) ([][]byte, error) {
	if err := s.Publish(ctx, key, data); err != nil {
		return nil, err
	}
	got, err := s.Gather(ctx, key)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(got))
	for n := range out {
		v, ok := got[n]
		if !ok {
			return nil, fmt.Errorf("%s: node %d published nothing", key, n)
		}
		out[n] = v
	}
	return out, nil
}
