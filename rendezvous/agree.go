package rendezvous

// The agreement core, shared by the backends that form a world of several nodes (tcp's server, etcd's counting
// node): ranks, the checks every node must pass, the world laid out and each node's share of it. For backends.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"maps"
	"math"
	"net"
	"sort"
	"strings"
	"time"
)

// AssignRanks gives requested ranks to their requesters and the free ranks to the others, ordered by slice then
// arrival. members are in arrival order; the result is the rank of each.
func AssignRanks(members []Member, nnodes int) ([]int, error) {
	ranks := make([]int, len(members))
	taken := map[int]int{}
	for i, m := range members {
		ranks[i] = -1
		if m.Rank >= 0 {
			if j, ok := taken[m.Rank]; ok {
				return nil, NewError(ErrDuplicateNode, fmt.Sprintf("node rank %d requested twice", m.Rank), m.Ref(m.Rank), members[j].Ref(m.Rank))
			}
			taken[m.Rank] = i
			ranks[i] = m.Rank
		}
	}
	var rest []int
	for i := range members {
		if ranks[i] < 0 {
			rest = append(rest, i)
		}
	}
	sort.SliceStable(rest, func(a, b int) bool { return members[rest[a]].SliceID < members[rest[b]].SliceID })
	next := 0
	for _, i := range rest {
		for ; next < nnodes; next++ {
			if _, ok := taken[next]; !ok {
				break
			}
		}
		ranks[i] = next
		taken[next] = i
		next++
	}
	return ranks, nil
}

// Agree checks that every member agrees on run id, accelerator type, workers per node (unless every member
// accepts uneven worlds) and slice count: otherwise a *MismatchError names the setting, each value and the nodes
// that gave it (the odd ones: those that differ from the most common value).
func Agree(members []Member, ranks []int, gen int) error {
	for _, f := range agreeFields(members) {
		vals := make([]string, len(members))
		refs := make([]NodeRef, len(members))
		for i, m := range members {
			vals[i], refs[i] = f.val(m), m.Ref(ranks[i])
		}
		if err := Disagreement(f.name, gen, vals, refs); err != nil {
			return err
		}
	}
	return nil
}

// MismatchError is a world whose nodes disagree on a setting that every node must share: the run id, the node
// count (or range), the accelerator type, the workers per node, the number of slices. Every node of the world gets
// it, at once. errors.Is(err, ErrMismatch) holds.
type MismatchError struct {
	Setting    string // "node count", "run id", "accelerator type", "workers per node", "number of slices"
	Generation int
	// Values holds each value given and the nodes that gave it: the most common first (on a tie, the one given by
	// the lowest node rank, else the first to arrive).
	Values []SettingValue
	Hint   string // what to do, in words
}

// SettingValue is one value of a disputed setting and the nodes that gave it.
type SettingValue struct {
	Value string    `json:"value"`
	Nodes []NodeRef `json:"nodes"`
}

func (e *MismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rendezvous: nodes disagree on the %s in generation %d: ", e.Setting, e.Generation)
	for i, v := range e.Values {
		if i > 0 {
			b.WriteString(" but ")
		}
		fmt.Fprintf(&b, "%s from ", quote(v.Value))
		for j, n := range v.Nodes {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(n.String())
		}
	}
	if e.Hint != "" {
		b.WriteString("; ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// Odd is the nodes that gave another value than the most common one.
func (e *MismatchError) Odd() []NodeRef {
	var out []NodeRef
	for _, v := range e.Values[min(1, len(e.Values)):] {
		out = append(out, v.Nodes...)
	}
	return out
}

// Disagreement is nil when every node gave the same value of setting, else the *MismatchError naming each value
// and who gave it. vals[i] is the value refs[i] gave.
func Disagreement(setting string, gen int, vals []string, refs []NodeRef) *MismatchError {
	var out []SettingValue
	at := map[string]int{}
	for i, v := range vals {
		j, ok := at[v]
		if !ok {
			j = len(out)
			at[v] = j
			out = append(out, SettingValue{Value: v})
		}
		out[j].Nodes = append(out[j].Nodes, refs[i])
	}
	if len(out) < 2 {
		return nil
	}
	low := func(v SettingValue) int { // the lowest node rank that gave v; unranked nodes after every ranked one
		r := math.MaxInt
		for _, n := range v.Nodes {
			if n.Rank >= 0 {
				r = min(r, n.Rank)
			}
		}
		return r
	}
	sort.SliceStable(out, func(a, b int) bool {
		if na, nb := len(out[a].Nodes), len(out[b].Nodes); na != nb {
			return na > nb
		}
		return low(out[a]) < low(out[b])
	})
	return &MismatchError{Setting: setting, Generation: gen, Values: out, Hint: "give every node the same " + setting}
}

// agreeField is one thing every member must agree on.
type agreeField struct {
	name string
	val  func(Member) string
}

// agreeFields are what members must agree on: the worker count per node only unless every member accepts uneven
// worlds (the world is then their sum).
func agreeFields(members []Member) []agreeField {
	fields := []agreeField{
		{"run id", func(m Member) string { return m.RunID }},
		{"accelerator type", func(m Member) string { return m.Accelerator }},
		{"number of slices", func(m Member) string { return fmt.Sprint(max(m.NumSlices, 1)) }},
	}
	for _, m := range members {
		if !m.UnevenWorkers {
			return append(fields, agreeField{"workers per node", func(m Member) string { return fmt.Sprint(m.LocalWorkers) }})
		}
	}
	return fields
}

// Agreed is a world as the one who agrees it sees it: every node in rank order, computed once; each node receives
// its share of it (share).
type Agreed struct {
	All   Assignment // what every node shares: NodeRank -1, Nodes nil
	nodes []Node     // every node, by rank
	// fixed: every node runs a fixed slice's share (no member accepts uneven worlds: TPU hosts), so a node needs the
	// names and addresses of its slice's nodes; else only its own.
	fixed bool
}

// AgreeWorld lays out the world of members with their agreed ranks: node 0's run id, ports and address are the
// world's; the coordinator of a multislice job is the first node of slice 0.
func AgreeWorld(members []Member, ranks []int) *Agreed {
	w := &Agreed{nodes: make([]Node, len(members)), fixed: true}
	var m0 Member
	for i, m := range members {
		r := ranks[i]
		w.nodes[r] = Node{Rank: r, Host: m.Host, Addr: m.Addr, Instance: m.Instance, LocalWorkers: m.LocalWorkers, SliceID: m.SliceID, Role: m.Role}
		if r == 0 {
			m0 = m
		}
		w.fixed = w.fixed && !m.UnevenWorkers
	}
	first := 0
	mega := ""
	var layout []Span
	for i := range w.nodes {
		n := &w.nodes[i]
		n.FirstRank = first
		first += n.LocalWorkers
		if mega == "" && n.SliceID == 0 {
			mega = n.Addr
		}
		if k := len(layout) - 1; k >= 0 && layout[k].LocalWorkers == n.LocalWorkers && layout[k].SliceID == n.SliceID && layout[k].Role == n.Role {
			layout[k].Nodes++
		} else {
			layout = append(layout, Span{Nodes: 1, LocalWorkers: n.LocalWorkers, SliceID: n.SliceID, Role: n.Role})
		}
	}
	ports := maps.Clone(m0.Ports)
	if ports == nil {
		ports = map[string]int{}
	}
	if p := ports[PortMegascale]; p != 0 && mega != "" {
		mega = net.JoinHostPort(mega, fmt.Sprint(p))
	}
	w.All = Assignment{NodeRank: -1, RunID: m0.RunID, Generation: m0.Generation, Accelerator: m0.Accelerator, NNodes: len(w.nodes),
		WorldSize: first, NumSlices: max(m0.NumSlices, 1), MasterAddr: m0.Addr, Ports: ports, MegascaleCoordinator: mega, Layout: layout}
	return w
}

// Share is node rank's share of w: what every node shares, and the nodes it needs by name (its slice's in a world
// of fixed slices, else itself). named: every node knows the nodes' names and addresses from the same host list
// (a static world named by it), so the share leaves them out and the receiver fills them in (nameFrom).
func (w *Agreed) Share(rank int, named bool) *Assignment {
	a := w.All
	a.NodeRank = rank
	a.Ports = maps.Clone(w.All.Ports)
	switch {
	case named && w.fixed:
		a.Nodes = nil
	case w.fixed:
		a.Nodes = w.slice(w.nodes[rank].SliceID)
	default:
		a.Nodes = []Node{w.nodes[rank]}
	}
	return &a
}

// slice is the nodes of slice id, in rank order.
func (w *Agreed) slice(id int) []Node {
	var out []Node
	for _, n := range w.nodes {
		if n.SliceID == id {
			out = append(out, n)
		}
	}
	return out
}

// NamedBy reports whether hosts names every node of w by rank, as a static world's host list does (a member
// without a name of its own takes hosts[rank] as name and address).
func (w *Agreed) NamedBy(hosts []string) bool {
	return w.NamedBySum(HostsSum(hosts))
}

// NamedBySum reports whether the host list whose sum is sum (hostsSum) names every node of w by rank: the server
// checks the list every node names without receiving it.
func (w *Agreed) NamedBySum(sum string) bool {
	if sum == "" {
		return false
	}
	hosts := make([]string, len(w.nodes))
	for r, n := range w.nodes {
		if n.Host != n.Addr {
			return false
		}
		hosts[r] = n.Host
	}
	return HostsSum(hosts) == sum
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// HostsSum is what a join carries instead of the host list: its length and CRC-32C ("4096:1b2c3d4e"), "" for no
// list. It checks that every node names the nodes from the same list, at the cost of reading it (a list of
// 4096 pod names is about 100 KiB: what 4096 joins would have carried each). It is no defence: a node holding the
// token is trusted.
func HostsSum(hosts []string) string {
	if len(hosts) == 0 {
		return ""
	}
	var sum uint32
	var buf [4096]byte
	b := buf[:0]
	for i, h := range hosts {
		if i > 0 {
			b = append(b, '\n')
		}
		for h != "" { // through buf: no allocation per name
			if len(b) == len(buf) {
				sum, b = crc32.Update(sum, castagnoli, b), buf[:0]
			}
			n := copy(buf[len(b):], h)
			b, h = buf[:len(b)+n], h[n:]
		}
		if len(b) == len(buf) {
			sum, b = crc32.Update(sum, castagnoli, b), buf[:0]
		}
	}
	return fmt.Sprintf("%d:%08x", len(hosts), crc32.Update(sum, castagnoli, b))
}

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
		by := map[int][]Node{}
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
		nodes, _ = json.Marshal([]Node{sh.w.nodes[rank]})
	}
	return [][]byte{fmt.Appendf(nil, `{"node_rank":%d,`, rank), sh.common, []byte(nodesKey), nodes, sh.tail}
}

// NameFrom fills in the nodes of a's slice from the host list that names every node by rank, when the share left
// them out (agreed.share with named).
func (a *Assignment) NameFrom(hosts []string) {
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

// Missing is the ErrMissingNodes error of generation gen, a world of min..nnodes nodes whose join ended after waited
// with only the members arrived: it names the ranks no member claimed (with their hosts when a host list names
// the nodes), and who arrived. For backends.
func Missing(gen, min, nnodes int, arrived []Member, hosts []string, waited time.Duration) error {
	claimed := map[int]bool{}
	var names []string
	anyRank := 0
	for _, m := range arrived {
		if m.Rank >= 0 {
			claimed[m.Rank] = true
		} else {
			anyRank++
		}
		names = append(names, m.Ref(m.Rank).String())
	}
	var nodes []NodeRef
	for r := 0; r < min; r++ {
		if claimed[r] {
			continue
		}
		if anyRank > 0 {
			anyRank--
			continue
		}
		n := NodeRef{Rank: r}
		if r < len(hosts) {
			n.Host = hosts[r]
		}
		nodes = append(nodes, n)
	}
	return NewError(ErrMissingNodes, fmt.Sprintf("generation %d: %d of %s nodes arrived within %s (arrived: %s); start tpurun on the missing nodes or raise the join timeout",
		gen, len(arrived), SizeRange(min, nnodes), waited.Round(time.Millisecond), shortList(names, 16)), nodes...)
}

// shortList joins the first n of l, and says how many more there are.
func shortList(l []string, n int) string {
	if len(l) <= n {
		return strings.Join(l, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(l[:n], ", "), len(l)-n)
}
