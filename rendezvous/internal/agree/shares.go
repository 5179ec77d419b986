package agree

import (
	"bytes"
	"encoding/json"
	"fmt"

	"tpurun/rendezvous"
)

// Shares is every node's share of an agreed world, encoded once (JSON) for the server's replies: the part every
// node shares (common), and the table of each slice of a world of fixed slices (SliceTable, sent beside the
// share: Table). A node's share is then `{"node_rank":R,` common nodes tail, where nodes is its own node (a world
// of CPU or GPU hosts) or null (named, or its slice's table). Encoding a share per node would cost the server
// O(nodes) per node in a world of one slice, and re-encode the common part as many times as there are nodes.
type Shares struct {
	w      *Agreed
	named  bool
	common []byte         // the fields between node_rank and nodes, each with its comma: `"run_id":"r",...,`
	tail   []byte         // what follows nodes: `}`
	slices map[int][]byte // the nodes of each slice (fixed, not named) whose table cannot be made, a JSON array
	tables map[int][]byte // the table of each other slice (fixed, not named), in its binary form
}

// nodesKey is the JSON key of Assignment.Nodes, the last field; node_rank is the first.
const nodesKey = `"nodes":`

// Encode lays out every node's share of w, encoded once (see shares).
func (w *Agreed) Encode(named bool) *Shares {
	sh := &Shares{w: w, named: named}
	all := w.All
	all.NodeRank, all.Nodes = 0, nil
	b, err := json.Marshal(&all)
	head := []byte(`{"node_rank":0,`)
	i := bytes.LastIndex(b, []byte(nodesKey+"null"))
	if err != nil || !bytes.HasPrefix(b, head) || i < 0 {
		return sh // not laid out as expected: each share is encoded whole (parts)
	}
	sh.common, sh.tail = b[len(head):i], b[i+len(nodesKey+"null"):]
	if w.fixed && !named {
		sh.slices, sh.tables = map[int][]byte{}, map[int][]byte{}
		by := map[int][]rendezvous.Node{}
		for _, n := range w.nodes {
			by[n.SliceID] = append(by[n.SliceID], n)
		}
		for id, nodes := range by {
			if t := sliceTable(nodes); t != nil {
				sh.tables[id], err = t.MarshalBinary()
			} else {
				sh.slices[id], err = json.Marshal(nodes)
			}
			if err != nil {
				sh.common = nil
				return sh
			}
		}
	}
	return sh
}

// Table is the table of node rank's slice in its binary form (SliceTable.MarshalBinary), encoded once for every
// host of it, to send beside its share (whose nodes are then null): nil when its share names its nodes itself. The
// receiver fills them in (SliceTable.Fill).
func (sh *Shares) Table(rank int) []byte {
	if sh.common == nil || sh.tables == nil {
		return nil
	}
	return sh.tables[sh.w.nodes[rank].SliceID]
}

// InParts reports whether the shares are laid out in parts (Value), as they are unless encoding failed.
func (sh *Shares) InParts() bool { return sh.common != nil }

// Value is node rank's share as JSON, in parts: its own (node_rank, its nodes) around those encoded once for
// every node (common, the slice's nodes, tail).
func (sh *Shares) Value(rank int) [][]byte {
	if sh.common == nil { // not laid out in parts: the share encoded whole
		b, err := json.Marshal(sh.w.Share(rank, sh.named))
		if err != nil {
			b = []byte("null")
		}
		return [][]byte{b}
	}
	var nodes []byte
	switch {
	case sh.named && sh.w.fixed:
		nodes = []byte("null")
	case sh.w.fixed && sh.tables[sh.w.nodes[rank].SliceID] != nil:
		nodes = []byte("null") // the table beside the share names them
	case sh.w.fixed:
		nodes = sh.slices[sh.w.nodes[rank].SliceID]
	default:
		nodes, _ = json.Marshal([]rendezvous.Node{sh.w.nodes[rank]})
	}
	return [][]byte{fmt.Appendf(nil, `{"node_rank":%d,`, rank), sh.common, []byte(nodesKey), nodes, sh.tail}
}

// NameFrom fills in the nodes of a's slice from the host list that names every node by rank, when the share left
// them out (Agreed.Share with named).
func NameFrom(a *rendezvous.Assignment, hosts []string) {
	if len(a.Nodes) > 0 || len(hosts) != a.NNodes {
		return
	}
	self := a.NodeRank
	all := a.AllNodes()
	if self < 0 || self >= len(all) {
		return
	}
	for _, n := range all {
		if n.SliceID == all[self].SliceID {
			n.Host, n.Addr = hosts[n.Rank], hosts[n.Rank]
			a.Nodes = append(a.Nodes, n)
		}
	}
}
