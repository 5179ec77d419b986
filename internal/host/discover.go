package host

import (
	"cmp"
	"fmt"
	"net"
	"strconv"

	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/internal/spec"
	"tpurun/internal/topology"
	"tpurun/rendezvous"
	"tpurun/rendezvous/static"
)

// discover makes the world the host's environment describes, once, before anything joins: on one host of a TPU
// slice of several hosts, or of a multislice job (topology.JobLayout), a run that asks for no world of its own (no
// backend, or the static backend without an endpoint or host list) joins the others as one static world over every
// slice: node rank = slice id x hosts per slice + worker id, node 0 the coordinator's host (slice 0's first), whose
// server every node meets on the rendezvous port (29400, or the port option). A run on purpose alone
// (RendezvousSpec.Alone: --nnodes 1, --standalone) plans this host as a one-host slice and says so. The world laid
// out this way needs no token off loopback, as torchrun's static world does not (one warning says so).
func (p *Prepared) discover() error {
	r := &p.spec.Rendezvous
	if p.Host == nil || !laidOutByHost(r) {
		return nil
	}
	l, err := p.Host.JobLayout(p.Request)
	if err != nil || l == nil {
		return err
	}
	if r.Alone {
		p.Log.Info("this host is one of several, but runs alone as asked: a world of one host", zap.Stringer("host", l),
			zap.Int("job_nodes", l.NNodes()))
		p.Host = p.Host.Alone()
		for _, k := range topology.JobEnv() {
			p.spec.Env = spec.WithoutEnv(p.spec.Env, k)
		}
		return nil
	}
	if r.NNodes > 0 && r.NNodes != l.NNodes() {
		return &failure.ConfigError{Field: failure.NNodes, Value: strconv.Itoa(r.NNodes),
			Hint: fmt.Sprintf("this host is %s: the job has %d nodes; give --nnodes %d, or leave it out", l, l.NNodes(), l.NNodes())}
	}
	p.Layout = l
	if r.Solo() || r.NodeRank < 0 { // a world of one has no rank to give (0 and -1 alike): the layout's
		r.NodeRank = l.NodeRank()
	}
	r.Backend, r.NNodes, r.MinNodes, r.AllowUnauthenticated = static.Name, l.NNodes(), 0, true
	r.NumSlices, r.SliceID = l.Slices, l.SliceID
	if r.RunID == "" && p.randomRunID { // every node must have the same: torchrun's, as under --rdzv-backend static
		p.spec.RunID, p.randomRunID = spec.NoRunID, false
		p.Log = p.spec.Logger.With(zap.String("run_id", spec.NoRunID))
	}
	r.RunID = cmp.Or(r.RunID, p.spec.RunID)
	if l.Slices > 1 { // no host list names every node: each names itself, and node 0's endpoint is the coordinator's
		r.Endpoint = net.JoinHostPort(l.Coordinator, cmp.Or(r.Conf["port"], strconv.Itoa(rendezvous.DefaultPort)))
		r.NodeName, r.NodeAddr = cmp.Or(r.NodeName, l.Self()), cmp.Or(r.NodeAddr, l.Self())
	}
	p.Log.Info("this host is one of several: joining them as one world", zap.Stringer("host", l), zap.Int("node_rank", r.NodeRank),
		zap.Int("nnodes", r.NNodes), zap.String("coordinator", l.Coordinator))
	return nil
}

// laidOutByHost reports whether the world of r is the host's to lay out: no backend (and not alone on purpose:
// that is checked by the caller, who says so), or the static backend with neither an endpoint nor a host list.
func laidOutByHost(r *spec.RendezvousSpec) bool {
	if r.Solo() { // --node-rank 0 of one node is the zero spec's; another rank is refused by validateSolo
		return r.NNodes <= 1 && r.NodeRank <= 0
	}
	return r.Backend == static.Name && r.Endpoint == "" && r.Conf["hosts"] == ""
}
