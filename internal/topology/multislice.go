package topology

import "maps"

// multisliceWorld is the world plan of a multi-slice TPU job: each slice is planned from its own hosts
// (TPU_WORKER_ID, TPU_PROCESS_ADDRESSES and CLOUD_TPU_TASK_ID are per slice) and the slices laid end to end for the
// global ranks. Other slices' workers carry only their ranks, unless w.EverySlice (a plan shown for the whole job),
// which plans them from this host's chips and request: every host of a multislice job has the same type.
func multisliceWorld(h *Host, req Request, w World) (*Plan, error) {
	addrs, first := w.addrs(), w.firstRanks()
	// Each slice's hosts and first global rank, and each node's index within its slice.
	hosts, sliceFirst, index := map[int][]string{}, map[int]int{}, make([]int, len(w.Nodes))
	for i, n := range w.Nodes {
		if _, ok := sliceFirst[n.SliceID]; !ok {
			sliceFirst[n.SliceID] = first[i]
		}
		index[i] = len(hosts[n.SliceID])
		hosts[n.SliceID] = append(hosts[n.SliceID], addrs[i])
	}
	plans := map[int]*Plan{} // each slice's, as the first node to plan it does
	plan := func(id, node int) (*Plan, error) {
		if p := plans[id]; p != nil {
			return p, nil
		}
		r := req
		r.Hosts, r.NodeRank = hosts[id], node
		p, err := NewPlan(h, r, World{})
		plans[id] = p
		return p, err
	}
	self := w.Nodes[w.NodeRank].SliceID
	sp, err := plan(self, index[w.NodeRank])
	if err != nil {
		return nil, err
	}
	world := &Plan{Device: sp.Device}
	for i, n := range w.Nodes {
		world.Nodes = append(world.Nodes, Node{Rank: i, Host: n.Host, LocalWorkers: n.LocalWorkers})
		if n.SliceID != self && !w.EverySlice { // only the ranks of another slice's workers
			for lr := range n.LocalWorkers {
				world.Workers = append(world.Workers, Worker{Rank: first[i] + lr, LocalRank: lr, NodeRank: i})
			}
			continue
		}
		if sp, err = plan(n.SliceID, 0); err != nil {
			return nil, err
		}
		for _, wk := range sp.Local(index[i]) {
			reps := make([]int, len(wk.Replicas))
			for j, r := range wk.Replicas {
				reps[j] = r + sliceFirst[n.SliceID]*len(wk.Replicas)
			}
			world.Workers = append(world.Workers, Worker{Rank: first[i] + wk.LocalRank, LocalRank: wk.LocalRank,
				NodeRank: i, Replicas: reps, Env: maps.Clone(wk.Env)})
		}
	}
	return world, nil
}
