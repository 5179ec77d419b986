package host

import (
	"net"
	"strconv"

	"tpurun/internal/topology"
	"tpurun/rendezvous"
)

// WorldPlan is the plan of the agreed world a, checked for busy ports on this node.
func (p *Prepared) WorldPlan(a *rendezvous.Assignment) (*topology.Plan, error) {
	w := topology.World{NodeRank: a.NodeRank, NumSlices: a.NumSlices, MegascaleCoordinator: a.MegascaleCoordinator,
		MegascalePort: a.Ports[rendezvous.PortMegascale]}
	for _, n := range a.AllNodes() { // names and addresses of the nodes this node needs: its slice's on TPU
		w.Nodes = append(w.Nodes, topology.WorldNode{Host: n.Host, Addr: n.Addr, LocalWorkers: n.LocalWorkers, SliceID: n.SliceID, Role: n.Role})
	}
	var plan *topology.Plan
	var err error
	if p.Host == nil { // a ready plan (Spec.Plan): its host split, spread over the agreed world
		plan, err = spreadPlan(p.Plan, p.NodeRank, w)
	} else if plan, err = topology.WorldPlan(p.Host, p.Request, w); err == nil {
		err = plan.CheckPorts(a.NodeRank, p.Host.ProcRoot, nil)
	}
	if err != nil {
		return nil, err
	}
	if port := a.Ports[rendezvous.PortCoordinator]; port != 0 { // node 0's pick, shared by every node
		plan.SetJAXCoordinator(net.JoinHostPort(a.MasterAddr, strconv.Itoa(port)))
	}
	return plan, nil
}

// spreadPlan gives every node of w the split of node nodeRank of a ready plan, with consecutive global ranks.
func spreadPlan(p *topology.Plan, nodeRank int, w topology.World) (*topology.Plan, error) {
	local := p.Local(nodeRank)
	out := &topology.Plan{Device: p.Device}
	rank := 0
	for n, node := range w.Nodes {
		out.Nodes = append(out.Nodes, topology.Node{Rank: n, Host: node.Addr, LocalWorkers: node.LocalWorkers})
		for lr := 0; lr < node.LocalWorkers; lr++ {
			env := map[string]string{}
			if lr < len(local) {
				for k, v := range local[lr].Env {
					env[k] = v
				}
			}
			out.Workers = append(out.Workers, topology.Worker{Rank: rank, LocalRank: lr, NodeRank: n, Replicas: []int{rank}, Env: env})
			rank++
		}
	}
	return out, nil
}
