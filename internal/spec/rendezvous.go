package spec

import (
	"cmp"
	"fmt"
	"strconv"
	"tpurun/internal/failure"
	"tpurun/rendezvous"
)

// RendezvousSpec says how this launcher meets the other nodes of a multi-host job: the rendezvous package's Config
// (RunID default Spec.RunID; Conf parsed where the spec is built, so a malformed option is refused there), which the
// host completes with the host list, the node rank and the logger, and what only the launcher reads. The zero value
// (no backend) is a world of one: this host alone, as detected.
type RendezvousSpec struct {
	rendezvous.Config
	NodeName  string // this node's identity; default the hostname (with "#<rank>" when NodeRank is given)
	NodeAddr  string // the address other nodes reach this node at; default the local address toward the endpoint
	NumSlices int    // multi-slice: number of slices; 0: MEGASCALE_NUM_SLICES as detection read it, else 1
	SliceID   int    // multi-slice: this node's slice; -1: MEGASCALE_SLICE_ID as detection read it, else 0
	// Alone: a world of one on purpose (--nnodes 1, --standalone), also on a host whose environment says it is one
	// of several (a TPU slice's host, a multislice job's); the zero spec on such a host joins the others (discover).
	Alone bool
}

// Solo reports whether r describes a world of one (no rendezvous).
func (r RendezvousSpec) Solo() bool {
	b, err := rendezvous.Lookup(r.Backend)
	return err == nil && b.Solo()
}

// Elastic reports whether r's backend forms an elastic world (tcp, etcd): it assigns the node ranks, and a node may
// come late, come back or replace one. A fixed world (static, the world of one) is laid out by the launch: its node
// count, node ranks and (static) node 0's endpoint, torchrun's --master-addr.
func (r RendezvousSpec) Elastic() bool {
	b, err := rendezvous.Lookup(r.Backend)
	return err == nil && b.Elastic()
}

// Validate checks r: its backend, and what a world of one or of several reads of it.
func (r RendezvousSpec) Validate() error {
	if _, err := rendezvous.Lookup(r.Backend); err != nil {
		return err
	}
	if r.Solo() {
		return r.validateSolo()
	}
	if r.NumSlices < 0 || r.SliceID < -1 || (r.NumSlices > 1 && r.SliceID >= r.NumSlices) {
		return &failure.ConfigError{Field: failure.SliceID, Value: fmt.Sprint(r.SliceID), Hint: fmt.Sprintf("need 0..%d for %d slices", max(r.NumSlices-1, 0), r.NumSlices)}
	}
	if r.NodeRank < -1 || (r.NNodes > 0 && r.NodeRank >= r.NNodes) {
		return &failure.ConfigError{Field: failure.NodeRank, Value: fmt.Sprint(r.NodeRank), Hint: fmt.Sprintf("need -1 (any) or 0..%d", r.NNodes-1)}
	}
	return validateName(failure.RendezvousRunID, r.RunID)
}

// validateSolo checks what a world of one node still reads of the rendezvous settings, so that a mistyped value
// is refused on one node as it would be on many: the node rank (only 0), the slice, the options and the timeout.
func (r RendezvousSpec) validateSolo() error {
	if r.NodeRank < -1 || r.NodeRank > 0 {
		return &failure.ConfigError{Field: failure.NodeRank, Value: strconv.Itoa(r.NodeRank),
			Hint: "a world of one node has only node rank 0; for several nodes give every node --nnodes N and its rank, or a rendezvous (--rdzv-backend c10d --rdzv-endpoint HOST:PORT)"}
	}
	if r.SliceID < -1 || r.NumSlices < 0 {
		return &failure.ConfigError{Field: failure.SliceID, Value: strconv.Itoa(r.SliceID), Hint: "need 0 or more (a world of one node is slice 0)"}
	}
	if r.Timeout < 0 {
		return &failure.ConfigError{Field: failure.RendezvousTimeout, Value: r.Timeout.String(), Hint: "must be positive"}
	}
	return cmp.Or(rendezvous.CheckConf(r.Conf), validateName(failure.RendezvousRunID, r.RunID))
}
