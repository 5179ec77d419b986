package topology

import "maps"

// The other slices of a multislice job, as `tpurun plan` shows them: a run plans its own slice only (its node
// starts its own workers; the others' env is theirs to build), but a plan of the whole job would otherwise list
// workers with none of the per-slice variables (TPU_WORKER_ID, CLOUD_TPU_TASK_ID, TPU_PROCESS_ADDRESSES,
// MEGASCALE_SLICE_ID) that each will have. With World.EverySlice every slice is planned as its own hosts plan
// it: from the same chips and request (every host of a multislice job has the same accelerator type), with the
// hosts of that slice as the world names them (placeholders such as "<slice-1-worker-0>" where this host cannot
// know their names: only that slice's hosts list them).

// otherSlices plans the workers of the slices other than this node's.
type otherSlices struct {
	h     *Host
	req   Request
	w     World
	addrs []string
	plans map[int]*Plan // each slice's, planned at its first node
	index []int         // each node's index within its slice
	first map[int]int   // the first global rank of each slice
}

func newOtherSlices(h *Host, req Request, w World, addrs []string, firstRanks []int) *otherSlices {
	o := &otherSlices{h: h, req: req, w: w, addrs: addrs, plans: map[int]*Plan{}, index: make([]int, len(w.Nodes)), first: map[int]int{}}
	count := map[int]int{}
	for i, n := range w.Nodes {
		o.index[i] = count[n.SliceID]
		count[n.SliceID]++
		if _, ok := o.first[n.SliceID]; !ok {
			o.first[n.SliceID] = firstRanks[i]
		}
	}
	return o
}

// workers are node i's workers (its global ranks from first): with their env when every slice is planned, else
// their ranks alone.
func (o *otherSlices) workers(i, first int) ([]Worker, error) {
	n := o.w.Nodes[i]
	var out []Worker
	if !o.w.EverySlice {
		for lr := 0; lr < n.LocalWorkers; lr++ {
			out = append(out, Worker{Rank: first + lr, LocalRank: lr, NodeRank: i})
		}
		return out, nil
	}
	sp, err := o.plan(n.SliceID)
	if err != nil {
		return nil, err
	}
	for _, wk := range sp.Local(o.index[i]) {
		reps := make([]int, len(wk.Replicas))
		for j, r := range wk.Replicas {
			reps[j] = r + o.first[n.SliceID]*len(wk.Replicas)
		}
		out = append(out, Worker{Rank: first + wk.LocalRank, LocalRank: wk.LocalRank, NodeRank: i, Replicas: reps, Env: maps.Clone(wk.Env)})
	}
	return out, nil
}

// plan is the plan of slice id, as its hosts make it.
func (o *otherSlices) plan(id int) (*Plan, error) {
	if p := o.plans[id]; p != nil {
		return p, nil
	}
	var hosts []string
	for i, n := range o.w.Nodes {
		if n.SliceID == id {
			hosts = append(hosts, o.addrs[i])
		}
	}
	req := o.req
	req.Hosts, req.NodeRank = hosts, 0
	p, err := NewPlan(o.h, req, World{})
	if err != nil {
		return nil, err
	}
	o.plans[id] = p
	return p, nil
}
