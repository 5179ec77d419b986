package rendezvous

import (
	"fmt"
	"maps"
	"math"
	"net"
	"sort"
	"strings"
)

// assignRanks gives requested ranks to their requesters and the free ranks to the others, ordered by slice then
// arrival. members are in arrival order; the result is the rank of each.
func assignRanks(members []Member, nnodes int) ([]int, error) {
	ranks := make([]int, len(members))
	taken := map[int]int{}
	for i, m := range members {
		ranks[i] = -1
		if m.Rank >= 0 {
			if j, ok := taken[m.Rank]; ok {
				return nil, newError(ErrDuplicateNode, fmt.Sprintf("node rank %d requested twice", m.Rank), m.ref(m.Rank), members[j].ref(m.Rank))
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

// agree checks that every member agrees on run id, accelerator type, workers per node (unless every member
// accepts uneven worlds) and slice count: otherwise a *MismatchError names the setting, each value and the nodes
// that gave it (the odd ones: those that differ from the most common value).
func agree(members []Member, ranks []int, gen int) error {
	for _, f := range agreeFields(members) {
		vals := make([]string, len(members))
		refs := make([]NodeRef, len(members))
		for i, m := range members {
			vals[i], refs[i] = f.val(m), m.ref(ranks[i])
		}
		if err := disagreement(f.name, gen, vals, refs); err != nil {
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

// disagreement is nil when every node gave the same value of setting, else the *MismatchError naming each value
// and who gave it. vals[i] is the value refs[i] gave.
func disagreement(setting string, gen int, vals []string, refs []NodeRef) *MismatchError {
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

// agreed is a world as the one who agrees it sees it: every node in rank order, computed once; each node receives
// its share of it (share).
type agreed struct {
	all   Assignment // what every node shares: NodeRank -1, Nodes nil
	nodes []Node     // every node, by rank
	// fixed: every node runs a fixed slice's share (no member accepts uneven worlds: TPU hosts), so a node needs the
	// names and addresses of its slice's nodes; else only its own.
	fixed bool
}

// agreeWorld lays out the world of members with their agreed ranks: node 0's run id, ports and address are the
// world's; the coordinator of a multislice job is the first node of slice 0.
func agreeWorld(members []Member, ranks []int) *agreed {
	w := &agreed{nodes: make([]Node, len(members)), fixed: true}
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
	w.all = Assignment{NodeRank: -1, RunID: m0.RunID, Generation: m0.Generation, Accelerator: m0.Accelerator, NNodes: len(w.nodes),
		WorldSize: first, NumSlices: max(m0.NumSlices, 1), MasterAddr: m0.Addr, Ports: ports, MegascaleCoordinator: mega, Layout: layout}
	return w
}

// share is node rank's share of w: what every node shares, and the nodes it needs by name (its slice's in a world
// of fixed slices, else itself). named: every node knows the nodes' names and addresses from the same host list
// (a static world named by it), so the share leaves them out and the receiver fills them in (nameFrom).
func (w *agreed) share(rank int, named bool) *Assignment {
	a := w.all
	a.NodeRank = rank
	a.Ports = maps.Clone(w.all.Ports)
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
func (w *agreed) slice(id int) []Node {
	var out []Node
	for _, n := range w.nodes {
		if n.SliceID == id {
			out = append(out, n)
		}
	}
	return out
}

// namedBy reports whether hosts names every node of w by rank, as a static world's host list does (a member
// without a name of its own takes hosts[rank] as name and address).
func (w *agreed) namedBy(hosts []string) bool {
	if len(hosts) != len(w.nodes) {
		return false
	}
	for r, n := range w.nodes {
		if n.Host != hosts[r] || n.Addr != hosts[r] {
			return false
		}
	}
	return true
}

// nameFrom fills in the nodes of a's slice from the host list that names every node by rank, when the share left
// them out (agreed.share with named).
func (a *Assignment) nameFrom(hosts []string) {
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
