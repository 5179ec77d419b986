package host

import (
	"net"
	"strconv"

	"go.uber.org/zap"

	"tpurun/internal/topology"
	"tpurun/rendezvous"
)

// World is what this node runs in one generation: the agreed plan, its place in it and the master the workers meet
// at. Met says the nodes met in a rendezvous to agree on it (a world of one agrees with itself: nothing to wait for,
// no rendezvous time to report).
type World struct {
	Plan       *topology.Plan
	NodeRank   int
	NNodes     int
	MasterAddr string
	MasterPort int
	Met        bool
}

// World is the world the assignment a describes: for a world of one, this host's plan as prepared and the master
// the spec gives; for a world of several, the plan of every node (checked for busy ports on this node) with node
// 0's master.
func (p *Prepared) World(a *rendezvous.Assignment) (World, error) {
	if p.solo {
		return World{Plan: p.Plan, NodeRank: p.NodeRank, NNodes: 1, MasterAddr: p.spec.MasterAddr, MasterPort: p.spec.MasterPort}, nil
	}
	p.Log.Info("rendezvous agreed", zap.Int("generation", a.Generation), zap.Int("node_rank", a.NodeRank), zap.Int("nnodes", a.NNodes),
		zap.Int("world_size", a.WorldSize), zap.String("master", net.JoinHostPort(a.MasterAddr, strconv.Itoa(a.MasterPort()))))
	w := topology.World{NodeRank: a.NodeRank, NumSlices: a.NumSlices, MegascaleCoordinator: a.MegascaleCoordinator,
		MegascalePort: a.Ports[rendezvous.PortMegascale]}
	for _, n := range a.AllNodes() { // names and addresses of the nodes this node needs: its slice's on TPU
		w.Nodes = append(w.Nodes, topology.WorldNode{Host: n.Host, Addr: n.Addr, LocalWorkers: n.LocalWorkers, SliceID: n.SliceID, Role: n.Role})
	}
	var plan *topology.Plan
	var err error
	if p.Host == nil { // a ready plan (Spec.Plan): its host split, spread over the agreed world
		plan = p.Plan.Spread(p.NodeRank, w)
	} else if plan, err = topology.NewPlan(p.Host, p.Request, w); err == nil {
		err = plan.CheckPorts(a.NodeRank, p.Host.ProcRoot, nil)
	}
	if err != nil {
		return World{}, err
	}
	if port := a.Ports[rendezvous.PortCoordinator]; port != 0 { // node 0's pick, shared by every node
		plan.SetJAXCoordinator(net.JoinHostPort(a.MasterAddr, strconv.Itoa(port)))
	}
	return World{Plan: plan, NodeRank: a.NodeRank, NNodes: a.NNodes, MasterAddr: a.MasterAddr, MasterPort: a.MasterPort(), Met: true}, nil
}
