package topology

import "maps"

// multisliceWorld is the world plan of a multi-slice TPU job: each slice is planned from its own hosts
// (TPU_WORKER_ID, TPU_PROCESS_ADDRESSES and CLOUD_TPU_TASK_ID are per slice) and the slices laid end to end for the
// global ranks. Other slices' workers carry only their ranks, unless w.EverySlice (a plan shown for the whole job),
// which plans them from this host's chips and request: every host of a multislice job has the same type.
func multisliceWorld(h *Host, req Request, w World) (*Plan, error) {
	self := w.Nodes[w.NodeRank]
	first := w.firstRanks()
	s := newSlicePlans(h, req, w, first)
	sp, err := s.plan(self.SliceID, s.index[w.NodeRank])
	if err != nil {
		return nil, err
	}
	world := &Plan{Device: sp.Device}
	for i, n := range w.Nodes {
		world.Nodes = append(world.Nodes, Node{Rank: i, Host: n.Host, LocalWorkers: n.LocalWorkers})
		wks, err := s.workers(i, first[i], n.SliceID == self.SliceID)
		if err != nil {
			return nil, err
		}
		world.Workers = append(world.Workers, wks...)
	}
	return world, nil
}

// slicePlans plans the slices of a multislice world, each from its own hosts.
type slicePlans struct {
	h     *Host
	req   Request
	w     World
	addrs []string
	plans map[int]*Plan // each slice's
	index []int         // each node's index within its slice
	first map[int]int   // the first global rank of each slice
}

func newSlicePlans(h *Host, req Request, w World, firstRanks []int) *slicePlans {
	s := &slicePlans{h: h, req: req, w: w, addrs: w.addrs(), plans: map[int]*Plan{}, index: make([]int, len(w.Nodes)),
		first: map[int]int{}}
	count := map[int]int{}
	for i, n := range w.Nodes {
		s.index[i] = count[n.SliceID]
		count[n.SliceID]++
		if _, ok := s.first[n.SliceID]; !ok {
			s.first[n.SliceID] = firstRanks[i]
		}
	}
	return s
}

// workers are node i's workers (its global ranks from first): with their env when its slice is planned (this
// node's, or every slice), else their ranks alone.
func (s *slicePlans) workers(i, first int, own bool) ([]Worker, error) {
	n := s.w.Nodes[i]
	var out []Worker
	if !own && !s.w.EverySlice {
		for lr := 0; lr < n.LocalWorkers; lr++ {
			out = append(out, Worker{Rank: first + lr, LocalRank: lr, NodeRank: i})
		}
		return out, nil
	}
	sp, err := s.plan(n.SliceID, 0)
	if err != nil {
		return nil, err
	}
	for _, wk := range sp.Local(s.index[i]) {
		reps := make([]int, len(wk.Replicas))
		for j, r := range wk.Replicas {
			reps[j] = r + s.first[n.SliceID]*len(wk.Replicas)
		}
		out = append(out, Worker{Rank: first + wk.LocalRank, LocalRank: wk.LocalRank, NodeRank: i, Replicas: reps,
			Env: maps.Clone(wk.Env)})
	}
	return out, nil
}

// plan is the plan of slice id as its node node plans it (the first plan of a slice is kept).
func (s *slicePlans) plan(id, node int) (*Plan, error) {
	if p := s.plans[id]; p != nil {
		return p, nil
	}
	var hosts []string
	for i, n := range s.w.Nodes {
		if n.SliceID == id {
			hosts = append(hosts, s.addrs[i])
		}
	}
	req := s.req
	req.Hosts, req.NodeRank = hosts, node
	p, err := NewPlan(s.h, req, World{})
	if err != nil {
		return nil, err
	}
	s.plans[id] = p
	return p, nil
}
