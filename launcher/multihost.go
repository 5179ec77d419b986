package launcher

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"tpurun/launcher/topology"
)

// WorldPlan turns the plan of one host (CPU or GPU: every node runs the same split) into the plan of the agreed
// world of len(hosts) nodes in node-rank order: node n's local rank lr is global rank n*k+lr and owns replica
// rank. TPU slices do not need it: topology.NewPlan with Request{Hosts, NodeRank} builds their world.
func WorldPlan(local *topology.Plan, hosts []string) (*topology.Plan, error) {
	if local == nil || len(local.Nodes) != 1 || len(local.Workers) == 0 {
		return nil, &ConfigError{Field: "plan", Value: "not a single-host plan",
			Hint: "a multi-host world is built from the plan of one host"}
	}
	if len(hosts) == 0 {
		return nil, &ConfigError{Field: "hosts", Value: "none", Hint: "the rendezvous agreed on no node"}
	}
	k := len(local.Workers)
	p := &topology.Plan{Device: local.Device}
	for n, h := range hosts {
		p.Nodes = append(p.Nodes, topology.Node{Rank: n, Host: h, LocalWorkers: k})
		for _, w := range local.Workers {
			rank := n*k + w.LocalRank
			env := maps.Clone(w.Env)
			if env == nil {
				env = map[string]string{}
			}
			p.Workers = append(p.Workers, topology.Worker{Rank: rank, LocalRank: w.LocalRank, NodeRank: n,
				Replicas: []int{rank}, Env: env})
		}
	}
	return p, nil
}

// Megascale is the multi-slice environment every worker of a multi-slice job gets (TPU_FACTS.md).
type Megascale struct {
	Coordinator string // host 0 of slice 0
	NumSlices   int
	Slices      []int // the slice id of each node, by node rank
	Port        int
}

// Apply sets MEGASCALE_COORDINATOR_ADDRESS, MEGASCALE_NUM_SLICES, MEGASCALE_SLICE_ID and MEGASCALE_PORT on every
// worker of p; a single slice (NumSlices <= 1) changes nothing.
func (m Megascale) Apply(p *topology.Plan) {
	if m.NumSlices <= 1 {
		return
	}
	for i := range p.Workers {
		if p.Workers[i].Env == nil {
			p.Workers[i].Env = map[string]string{}
		}
		e := p.Workers[i].Env
		e["MEGASCALE_COORDINATOR_ADDRESS"] = m.Coordinator
		e["MEGASCALE_NUM_SLICES"] = strconv.Itoa(m.NumSlices)
		if n := p.Workers[i].NodeRank; n < len(m.Slices) {
			e["MEGASCALE_SLICE_ID"] = strconv.Itoa(m.Slices[n])
		}
		e["MEGASCALE_PORT"] = strconv.Itoa(m.Port)
	}
}

// String names the multi-slice setting for logs.
func (m Megascale) String() string {
	return fmt.Sprintf("%d slices, coordinator %s, port %d", m.NumSlices, m.Coordinator, m.Port)
}

// sweepTagEnv marks the workers of one launcher when Config.SweepTag is set.
const sweepTagEnv = "TPURUN_SWEEP_TAG"

// withSweepTag replaces any inherited TPURUN_SWEEP_TAG in env with tag.
func withSweepTag(env []string, tag string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, sweepTagEnv+"=") {
			out = append(out, kv)
		}
	}
	return append(out, sweepTagEnv+"="+tag)
}
