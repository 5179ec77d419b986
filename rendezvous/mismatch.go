package rendezvous

import (
	"fmt"
	"strings"
)

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
