package agree

import (
	"fmt"
	"math"
	"sort"

	"tpurun/rendezvous"
)

// AssignRanks gives requested ranks to their requesters and the free ranks to the others, ordered by slice then
// arrival. members are in arrival order; the result is the rank of each.
func AssignRanks(members []rendezvous.Member, nnodes int) ([]int, error) {
	ranks := make([]int, len(members))
	taken := map[int]int{}
	for i, m := range members {
		ranks[i] = -1
		if m.Rank >= 0 {
			if j, ok := taken[m.Rank]; ok {
				return nil, NewError(rendezvous.ErrDuplicateNode, fmt.Sprintf("node rank %d requested twice", m.Rank), m.Ref(m.Rank), members[j].Ref(m.Rank))
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
func Agree(members []rendezvous.Member, ranks []int, gen int) error {
	for _, f := range agreeFields(members) {
		vals := make([]string, len(members))
		refs := make([]rendezvous.NodeRef, len(members))
		for i, m := range members {
			vals[i], refs[i] = f.val(m), m.Ref(ranks[i])
		}
		if err := Disagreement(f.name, gen, vals, refs); err != nil {
			return err
		}
	}
	return nil
}

// Disagreement is nil when every node gave the same value of setting, else the *MismatchError naming each value
// and who gave it. vals[i] is the value refs[i] gave.
func Disagreement(setting string, gen int, vals []string, refs []rendezvous.NodeRef) *rendezvous.MismatchError {
	var out []rendezvous.SettingValue
	at := map[string]int{}
	for i, v := range vals {
		j, ok := at[v]
		if !ok {
			j = len(out)
			at[v] = j
			out = append(out, rendezvous.SettingValue{Value: v})
		}
		out[j].Nodes = append(out[j].Nodes, refs[i])
	}
	if len(out) < 2 {
		return nil
	}
	low := func(v rendezvous.SettingValue) int { // the lowest node rank that gave v; unranked nodes after every ranked one
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
	return &rendezvous.MismatchError{Setting: setting, Generation: gen, Values: out, Hint: "give every node the same " + setting}
}

// agreeField is one thing every member must agree on.
type agreeField struct {
	name string
	val  func(rendezvous.Member) string
}

// agreeFields are what members must agree on: the worker count per node only unless every member accepts uneven
// worlds (the world is then their sum).
func agreeFields(members []rendezvous.Member) []agreeField {
	fields := []agreeField{
		{"run id", func(m rendezvous.Member) string { return m.RunID }},
		{"accelerator type", func(m rendezvous.Member) string { return m.Accelerator }},
		{"number of slices", func(m rendezvous.Member) string { return fmt.Sprint(max(m.NumSlices, 1)) }},
	}
	for _, m := range members {
		if !m.UnevenWorkers {
			return append(fields, agreeField{"workers per node", func(m rendezvous.Member) string { return fmt.Sprint(m.LocalWorkers) }})
		}
	}
	return fields
}
