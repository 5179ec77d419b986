package agree

import (
	"fmt"
	"strings"

	"tpurun/rendezvous"
)

// SliceTable is the hosts of one slice of a world of fixed slices as a share carries them (tcp, static): each
// host's name, address and instance, in the slice's node-rank order, one per line. The rest of each node (rank,
// workers, slice, first global rank) follows from the share's Layout. It is built and encoded once per slice and
// sent to every host of the slice as the same bytes, and a host reads it as three strings, not as thousands of
// objects: a full v5p pod (2240 hosts in one slice) costs each host a string split, not a decode of 2240 objects,
// and the pod forms like 2240 small hosts.
type SliceTable struct {
	Hosts string `json:"hosts"`
	Addrs string `json:"addrs,omitempty"`
	// SameAddrs: every host's address is its name (a slice named by its TPU_WORKER_HOSTNAMES); Addrs is empty.
	SameAddrs bool   `json:"same_addrs,omitempty"`
	Instances string `json:"instances"`
}

// tableSep separates a table's entries, and tableEnd its three lists in its binary form: no host name or instance
// holds either (Member.Validate), and a slice whose addresses do is sent as nodes (sliceTable).
const (
	tableSep = "\n"
	tableEnd = "\x00"
)

// MarshalBinary is t as it travels: 's' (every address is its host's name) or 'a', then the hosts, the addresses
// and the instances, each list ended by a NUL. A host reads it without decoding anything (UnmarshalBinary).
func (t *SliceTable) MarshalBinary() ([]byte, error) {
	kind := "a"
	if t.SameAddrs {
		kind = "s"
	}
	return []byte(kind + t.Hosts + tableEnd + t.Addrs + tableEnd + t.Instances + tableEnd), nil
}

// UnmarshalBinary reads t from its binary form (MarshalBinary); a malformed one is an ErrProtocol error.
func (t *SliceTable) UnmarshalBinary(b []byte) error {
	s := string(b)
	parts := strings.Split(strings.TrimSuffix(s[min(1, len(s)):], tableEnd), tableEnd)
	if len(s) < 1 || (s[0] != 's' && s[0] != 'a') || len(parts) != 3 {
		return NewError(rendezvous.ErrProtocol, fmt.Sprintf("a slice table of %d bytes is malformed", len(b)))
	}
	*t = SliceTable{SameAddrs: s[0] == 's', Hosts: parts[0], Addrs: parts[1], Instances: parts[2]}
	return nil
}

// sliceTable is the table of nodes (one slice, in rank order), or nil when a field holds tableSep.
func sliceTable(nodes []rendezvous.Node) *SliceTable {
	hosts, addrs, insts := make([]string, len(nodes)), make([]string, len(nodes)), make([]string, len(nodes))
	named := true
	for i, n := range nodes {
		if strings.ContainsAny(n.Host+n.Addr+n.Instance, tableSep+tableEnd) {
			return nil
		}
		hosts[i], addrs[i], insts[i] = n.Host, n.Addr, n.Instance
		named = named && n.Addr == n.Host
	}
	t := &SliceTable{Hosts: strings.Join(hosts, tableSep), Instances: strings.Join(insts, tableSep), SameAddrs: named}
	if !named {
		t.Addrs = strings.Join(addrs, tableSep)
	}
	return t
}

// Check reports whether t fits a's layout: as many hosts, addresses and instances as a's slice has nodes. It
// counts separators, allocating nothing: a host checks its share as it joins, and fills its nodes in (Fill) when
// they are asked for. A table that does not fit is an ErrProtocol error.
func (t *SliceTable) Check(a *rendezvous.Assignment) error {
	slice, n, err := ownSlice(a)
	if err != nil {
		return err
	}
	hosts, addrs, insts := strings.Count(t.Hosts, tableSep)+1, strings.Count(t.Addrs, tableSep)+1, strings.Count(t.Instances, tableSep)+1
	if t.SameAddrs {
		addrs = hosts
	}
	if hosts != n || addrs != n || insts != n || (t.SameAddrs && t.Addrs != "") {
		return NewError(rendezvous.ErrProtocol, fmt.Sprintf("the table of slice %d names %d hosts, %d addresses and %d instances; its layout has %d nodes",
			slice, hosts, addrs, insts, n))
	}
	return nil
}

// Fill sets a's Nodes, the nodes of its own slice, from t and a's layout (see Check).
func (t *SliceTable) Fill(a *rendezvous.Assignment) error {
	if err := t.Check(a); err != nil {
		return err
	}
	slice, n, _ := ownSlice(a)
	hosts, insts := strings.Split(t.Hosts, tableSep), strings.Split(t.Instances, tableSep)
	addrs := hosts
	if !t.SameAddrs {
		addrs = strings.Split(t.Addrs, tableSep)
	}
	nodes := make([]rendezvous.Node, 0, n)
	rank, first := 0, 0
	for _, sp := range a.Layout {
		for range sp.Nodes {
			if sp.SliceID == slice {
				i := len(nodes)
				nodes = append(nodes, rendezvous.Node{Rank: rank, Host: hosts[i], Addr: addrs[i], Instance: insts[i], LocalWorkers: sp.LocalWorkers,
					SliceID: sp.SliceID, Role: sp.Role, FirstRank: first})
			}
			rank++
			first += sp.LocalWorkers
		}
	}
	a.Nodes = nodes
	return nil
}

// ownSlice is the slice of a's node and its number of nodes, from a's layout.
func ownSlice(a *rendezvous.Assignment) (slice, n int, err error) {
	slice, rank := -1, 0
	for _, sp := range a.Layout {
		if slice < 0 && a.NodeRank >= rank && a.NodeRank < rank+sp.Nodes {
			slice = sp.SliceID
		}
		rank += sp.Nodes
	}
	if slice < 0 || rank != a.NNodes {
		return 0, 0, NewError(rendezvous.ErrProtocol, fmt.Sprintf("a share of node rank %d in a world of %d nodes laid out as %d", a.NodeRank, a.NNodes, rank))
	}
	for _, sp := range a.Layout {
		if sp.SliceID == slice {
			n += sp.Nodes
		}
	}
	return slice, n, nil
}
