package agree

import (
	"fmt"
	"hash/crc32"
	"maps"
	"net"

	"tpurun/rendezvous"
)

// Agreed is a world as the one who agrees it sees it: every node in rank order, computed once; each node receives
// its share of it (share).
type Agreed struct {
	All   rendezvous.Assignment // what every node shares: NodeRank -1, Nodes nil
	nodes []rendezvous.Node     // every node, by rank
	// fixed: every node runs a fixed slice's share (no member accepts uneven worlds: TPU hosts), so a node needs the
	// names and addresses of its slice's nodes; else only its own.
	fixed bool
}

// AgreeWorld lays out the world of members with their agreed ranks: node 0's run id, ports and address are the
// world's; the coordinator of a multislice job is the first node of slice 0.
func AgreeWorld(members []rendezvous.Member, ranks []int) *Agreed {
	w := &Agreed{nodes: make([]rendezvous.Node, len(members)), fixed: true}
	var m0 rendezvous.Member
	for i, m := range members {
		r := ranks[i]
		w.nodes[r] = rendezvous.Node{Rank: r, Host: m.Host, Addr: m.Addr, Instance: m.Instance, LocalWorkers: m.LocalWorkers, SliceID: m.SliceID, Role: m.Role}
		if r == 0 {
			m0 = m
		}
		w.fixed = w.fixed && !m.UnevenWorkers
	}
	first := 0
	mega := ""
	var layout []rendezvous.Span
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
			layout = append(layout, rendezvous.Span{Nodes: 1, LocalWorkers: n.LocalWorkers, SliceID: n.SliceID, Role: n.Role})
		}
	}
	ports := maps.Clone(m0.Ports)
	if ports == nil {
		ports = map[string]int{}
	}
	if p := ports[rendezvous.PortMegascale]; p != 0 && mega != "" {
		mega = net.JoinHostPort(mega, fmt.Sprint(p))
	}
	w.All = rendezvous.Assignment{NodeRank: -1, RunID: m0.RunID, Generation: m0.Generation, Accelerator: m0.Accelerator, NNodes: len(w.nodes),
		WorldSize: first, NumSlices: max(m0.NumSlices, 1), MasterAddr: m0.Addr, Ports: ports, MegascaleCoordinator: mega, Layout: layout}
	return w
}

// Share is node rank's share of w: what every node shares, and the nodes it needs by name (its slice's in a world
// of fixed slices, else itself). named: every node knows the nodes' names and addresses from the same host list
// (a static world named by it), so the share leaves them out and the receiver fills them in (nameFrom).
func (w *Agreed) Share(rank int, named bool) *rendezvous.Assignment {
	a := w.All
	a.NodeRank = rank
	a.Ports = maps.Clone(w.All.Ports)
	switch {
	case named && w.fixed:
		a.Nodes = nil
	case w.fixed:
		a.Nodes = w.slice(w.nodes[rank].SliceID)
	default:
		a.Nodes = []rendezvous.Node{w.nodes[rank]}
	}
	return &a
}

// slice is the nodes of slice id, in rank order.
func (w *Agreed) slice(id int) []rendezvous.Node {
	var out []rendezvous.Node
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
