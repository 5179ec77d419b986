package rendezvous

import (
	"fmt"
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
// accepts uneven worlds) and slice count; the odd nodes (those that differ from the most common value) are named.
func agree(members []Member, ranks []int, nnodes int) error {
	for _, f := range agreeFields(members) {
		count := map[string]int{}
		first := map[string]int{}
		for i, m := range members {
			v := f.val(m)
			if _, ok := count[v]; !ok {
				first[v] = ranks[i]
			}
			count[v]++
		}
		if len(count) < 2 {
			continue
		}
		want, set := "", false
		for v, n := range count {
			if !set || n > count[want] || (n == count[want] && first[v] < first[want]) {
				want, set = v, true
			}
		}
		var odd []NodeRef
		var vals []string
		for i, m := range members {
			if v := f.val(m); v != want {
				odd = append(odd, m.ref(ranks[i]))
				vals = append(vals, fmt.Sprintf("%q on node rank %d", v, ranks[i]))
			}
		}
		return newError(ErrMismatch, fmt.Sprintf("%s differs: %d of %d nodes have %q but %s; give every node the same value",
			f.name, count[want], len(members), want, strings.Join(vals, ", ")), odd...)
	}
	return nil
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

// buildAssignment lays out the agreed world (NodeRank left for the caller).
func buildAssignment(members []Member, ranks []int) *Assignment {
	nodes := make([]Node, len(members))
	var m0 Member
	for i, m := range members {
		r := ranks[i]
		nodes[r] = Node{Rank: r, Host: m.Host, Addr: m.Addr, Instance: m.Instance, LocalWorkers: m.LocalWorkers, SliceID: m.SliceID, Role: m.Role}
		if r == 0 {
			m0 = m
		}
	}
	first := 0
	mega := ""
	for i := range nodes {
		nodes[i].FirstRank = first
		first += nodes[i].LocalWorkers
		if mega == "" && nodes[i].SliceID == 0 {
			mega = nodes[i].Addr
		}
	}
	ports := map[string]int{}
	for k, v := range m0.Ports {
		ports[k] = v
	}
	if p := ports[PortMegascale]; p != 0 && mega != "" {
		mega = net.JoinHostPort(mega, fmt.Sprint(p))
	}
	return &Assignment{RunID: m0.RunID, Generation: m0.Generation, Accelerator: m0.Accelerator, Nodes: nodes,
		WorldSize: first, NumSlices: max(m0.NumSlices, 1), MasterAddr: m0.Addr, Ports: ports, MegascaleCoordinator: mega}
}
