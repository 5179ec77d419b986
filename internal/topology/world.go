package topology

import (
	"context"
	"fmt"
	"maps"
	"net"
	"strconv"

	"tpurun/internal/failure"

	"go.uber.org/zap"
)

// WorldNode is one node of an agreed world, as a rendezvous hands it to the planner (in node-rank order).
type WorldNode struct {
	Host         string // the node's name
	Addr         string // the address other nodes reach it at: what TPU_PROCESS_ADDRESSES and the world env name
	LocalWorkers int
	SliceID      int
	Role         string // torchrun's role of the node's workers: ROLE_RANK and ROLE_WORLD_SIZE count within it
}

// World is the agreed world of a run: every node in node-rank order, which one this host is, and the multi-slice
// setting. The zero World is this host alone, as detected.
type World struct {
	Nodes                []WorldNode
	NodeRank             int
	NumSlices            int    // > 1: a multi-slice job (MEGASCALE_*)
	MegascaleCoordinator string // host 0 of slice 0, the address alone
	MegascalePort        int
	// EverySlice plans every slice's workers with their env, not only this node's slice's (a plan shown).
	EverySlice bool
}

// Solo reports whether w is the zero World: no rendezvous, the host as detected.
func (w World) Solo() bool { return len(w.Nodes) == 0 }

// LocalWorkers is how many workers this host runs in a world of nnodes nodes (0: as detected) in numSlices
// slices: what the node announces when it joins a rendezvous. It validates the request like the full plan does.
func LocalWorkers(h *Host, req Request, nnodes, numSlices int) (int, error) {
	return h.Device.V.Kind().localWorkers(h, req, nnodes, numSlices)
}

// worldPlan is NewPlan's plan of a world of several nodes: TPU slices are planned per slice (its hosts in node
// order), CPU and GPU worlds laid end to end (spreadWorld); a multi-slice world gets MEGASCALE_* on every worker.
func worldPlan(h *Host, req Request, w World) (*Plan, error) {
	if w.NodeRank < 0 || w.NodeRank >= len(w.Nodes) {
		return nil, &failure.ConfigError{Kind: ErrConfig, Field: failure.NodeRank, Value: strconv.Itoa(w.NodeRank),
			Problem: fmt.Sprintf("is not an index of the %d agreed nodes", len(w.Nodes)), Sources: sources{Derived("rendezvous")}}
	}
	p, err := h.Device.V.Kind().worldPlan(h, req, w)
	if err != nil {
		return nil, err
	}
	w.megascale(p)
	return p, nil
}

// Spread is the plan of the agreed world w for a ready plan p (one made by hand, not detected): every node of w gets
// the split of p's node nodeRank, with consecutive global ranks. The zero World is p itself.
func (p *Plan) Spread(nodeRank int, w World) *Plan {
	if w.Solo() {
		return p
	}
	local := p.Local(nodeRank)
	out := &Plan{Device: p.Device}
	rank := 0
	for n, node := range w.Nodes {
		out.Nodes = append(out.Nodes, Node{Rank: n, Host: node.Addr, LocalWorkers: node.LocalWorkers})
		for lr := 0; lr < node.LocalWorkers; lr++ {
			out.Workers = append(out.Workers, Worker{Rank: rank, LocalRank: lr, NodeRank: n, Replicas: []int{rank}, Env: localEnv(local, lr)})
			rank++
		}
	}
	return out
}

// localEnv is a copy of the env of local rank lr of local (empty past its end).
func localEnv(local []Worker, lr int) map[string]string {
	env := map[string]string{}
	if lr < len(local) {
		maps.Copy(env, local[lr].Env)
	}
	return env
}

// addrs are the agreed addresses of the nodes in node-rank order (the name where a node gave no address).
func (w World) addrs() []string {
	out := make([]string, len(w.Nodes))
	for i, n := range w.Nodes {
		out[i] = n.Addr
		if out[i] == "" {
			out[i] = n.Host
		}
	}
	return out
}

// firstRanks is each node's first global rank: the local workers of the nodes before it.
func (w World) firstRanks() []int {
	out := make([]int, len(w.Nodes))
	sum := 0
	for i, n := range w.Nodes {
		out[i] = sum
		sum += n.LocalWorkers
	}
	return out
}

// perHost is what the CPU and GPU kinds share: each host is planned alone and a world lays the hosts' plans end to
// end (spreadWorld), its nodes may run different numbers of workers, and no device node is guarded.
type perHost struct{}

func (perHost) FixedSlice() bool                                          { return false }
func (perHost) JAXCoordinator() bool                                      { return true }
func (perHost) nodes(d *detector)                                         { d.envNodes() }
func (perHost) soloNode(*Host, Request) int                               { return 0 }
func (perHost) usableNodes(*Host) []string                                { return nil }
func (perHost) probe(context.Context, *Host, Options, *zap.Logger) *Probe { return nil }

func (perHost) localWorkers(h *Host, req Request, _, _ int) (int, error) {
	p, err := NewPlan(h, req, World{})
	if err != nil {
		return 0, err
	}
	return len(p.Workers), nil
}

func (perHost) worldPlan(h *Host, req Request, w World) (*Plan, error) {
	local, err := NewPlan(h, req, World{})
	if err != nil {
		return nil, err
	}
	return spreadWorld(local, w), nil
}

// spreadWorld turns the plan of one host into the world of w: node n's local rank lr is the global rank of the
// workers before n plus lr and owns that replica; ROLE_RANK and ROLE_WORLD_SIZE count within the node's role, as
// torchrun's do.
func spreadWorld(local *Plan, w World) *Plan {
	p := &Plan{Device: local.Device}
	first := w.firstRanks()
	addrs := w.addrs()
	ks := make([]int, len(w.Nodes))
	roleSize, roleNext := map[string]int{}, map[string]int{}
	for n, node := range w.Nodes {
		ks[n] = node.LocalWorkers
		if n == w.NodeRank || ks[n] == 0 {
			ks[n] = len(local.Workers)
		}
		roleSize[node.Role] += ks[n]
	}
	for n, node := range w.Nodes {
		p.Nodes = append(p.Nodes, Node{Rank: n, Host: addrs[n], LocalWorkers: ks[n]})
		for lr := 0; lr < ks[n]; lr++ {
			rank := first[n] + lr
			env := localEnv(local.Workers, lr)
			env["ROLE_RANK"] = strconv.Itoa(roleNext[node.Role] + lr)
			env["ROLE_WORLD_SIZE"] = strconv.Itoa(roleSize[node.Role])
			p.Workers = append(p.Workers, Worker{Rank: rank, LocalRank: lr, NodeRank: n, Replicas: []int{rank}, Env: env})
		}
		roleNext[node.Role] += ks[n]
	}
	return p
}

// megascale sets the MEGASCALE_* variables on every worker of p that has an env (TPU_FACTS.md) in a multi-slice
// world. A coordinator address and port the worker inherits (GKE, a JobSet's downward API, tpu-env) are kept.
func (w World) megascale(p *Plan) {
	if w.NumSlices <= 1 {
		return
	}
	coord := w.MegascaleCoordinator
	if host, _, err := net.SplitHostPort(coord); err == nil {
		coord = host // the address alone, as GKE sets it; the port is MEGASCALE_PORT
	}
	for i := range p.Workers {
		wk := &p.Workers[i]
		if wk.Env == nil {
			continue // another slice's worker: only its rank is known here
		}
		if _, inherited := wk.Env[megascaleCoordinator]; !inherited {
			wk.Env[megascaleCoordinator] = coord
		}
		if _, inherited := wk.Env[megascalePort]; !inherited {
			wk.Env[megascalePort] = strconv.Itoa(w.MegascalePort)
		}
		wk.Env[EnvMegascaleNumSlices] = strconv.Itoa(w.NumSlices)
		wk.Env[EnvMegascaleSliceID] = strconv.Itoa(w.Nodes[wk.NodeRank].SliceID)
	}
}
