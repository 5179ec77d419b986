package agree

import (
	"fmt"
	"strings"
	"time"

	"tpurun/internal/failure"
	"tpurun/rendezvous"
)

// NewError is a *rendezvous.Error of kind (one of the package rendezvous's sentinels) about nodes: a backend's
// errors are the package's, which a program matches.
func NewError(kind error, detail string, nodes ...rendezvous.NodeRef) *rendezvous.Error {
	return &rendezvous.Error{Kind: kind, Nodes: nodes, Detail: detail}
}

// ConfigError is an error matching rendezvous.ErrConfig naming the setting at fault (Error.Field) and its value.
func ConfigError(field failure.Setting, value, detail string) *rendezvous.Error {
	return &rendezvous.Error{Kind: rendezvous.ErrConfig, Field: string(field), Value: value, Detail: detail}
}

// StoreLost is an error matching rendezvous.ErrStoreLost naming the store's endpoint (Field
// failure.RendezvousEndpoint).
func StoreLost(endpoint, detail string, nodes ...rendezvous.NodeRef) *rendezvous.Error {
	return &rendezvous.Error{Kind: rendezvous.ErrStoreLost, Nodes: nodes, Field: string(failure.RendezvousEndpoint), Value: endpoint, Detail: detail}
}

// SizeRange says a world size in a message: "4", or "2..4" when elastic (min 0 means max).
func SizeRange(min, max int) string {
	if min == 0 || min == max {
		return fmt.Sprint(max)
	}
	return fmt.Sprintf("%d..%d", min, max)
}

// Missing is the ErrMissingNodes error of generation gen, a world of min..nnodes nodes whose join ended after waited
// with only the members arrived: it names the ranks no member claimed (with their hosts when a host list names
// the nodes), and who arrived.
func Missing(gen, min, nnodes int, arrived []rendezvous.Member, hosts []string, waited time.Duration) error {
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
	var nodes []rendezvous.NodeRef
	for r := 0; r < min; r++ {
		if claimed[r] {
			continue
		}
		if anyRank > 0 {
			anyRank--
			continue
		}
		n := rendezvous.NodeRef{Rank: r}
		if r < len(hosts) {
			n.Host = hosts[r]
		}
		nodes = append(nodes, n)
	}
	return NewError(rendezvous.ErrMissingNodes, fmt.Sprintf("generation %d: %d of %s nodes arrived within %s (arrived: %s); start tpurun on the missing nodes or raise the join timeout",
		gen, len(arrived), SizeRange(min, nnodes), waited.Round(time.Millisecond), shortList(names, 16)), nodes...)
}

// shortList joins the first n of l, and says how many more there are.
func shortList(l []string, n int) string {
	if len(l) <= n {
		return strings.Join(l, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(l[:n], ", "), len(l)-n)
}
