package topology

import (
	"context"
	"slices"
	"testing"
)

// TestWorldPlanCPU: 3 agreed nodes of 2 CPU workers each give ranks n*2+l, one replica per rank, every rank's env
// is the host plan's env (a copy, not shared), and a multi-slice world sets MEGASCALE_* from the agreed nodes.
func TestWorldPlanCPU(t *testing.T) {
	h, err := Detect(context.Background(), Options{Device: "cpu", LookupEnv: envOf(nil), SysfsRoot: t.TempDir(), DevRoot: t.TempDir()})
	must(t, err)
	w := World{NodeRank: 1, NumSlices: 3, MegascaleCoordinator: "h0:8081", MegascalePort: 8081}
	for i, name := range []string{"a", "b", "c"} {
		w.Nodes = append(w.Nodes, WorldNode{Host: name, Addr: "10.0.0." + string(rune('1'+i)), LocalWorkers: 2, SliceID: i})
	}
	p, err := NewPlan(h, Request{NProcs: 2}, w)
	must(t, err)
	if len(p.Nodes) != 3 || len(p.Workers) != 6 || p.Nodes[2].Host != "10.0.0.3" {
		t.Fatalf("%d nodes %d workers (%+v), want 3 and 6", len(p.Nodes), len(p.Workers), p.Nodes)
	}
	for i, wk := range p.Workers {
		if wk.Rank != i || wk.NodeRank != i/2 || wk.LocalRank != i%2 || !slices.Equal(wk.Replicas, []int{i}) {
			t.Fatalf("worker %d: %+v", i, wk)
		}
		if wk.Env["PJRT_LOCAL_PROCESS_RANK"] != string(rune('0'+i%2)) {
			t.Fatalf("worker %d env %v", i, wk.Env)
		}
	}
	p.Workers[0].Env["X"] = "1"
	if _, shared := p.Workers[2].Env["X"]; shared {
		t.Fatal("node 1's env map is node 0's")
	}
	if e := p.Workers[5].Env; e["MEGASCALE_SLICE_ID"] != "2" || e["MEGASCALE_NUM_SLICES"] != "3" || e["MEGASCALE_COORDINATOR_ADDRESS"] != "h0" || e["MEGASCALE_PORT"] != "8081" {
		t.Fatalf("rank 5 megascale env: %v", e)
	}
	if _, err := NewPlan(h, Request{NProcs: 2}, World{Nodes: w.Nodes, NodeRank: 3}); err == nil {
		t.Fatal("node rank 3 of 3 nodes was accepted")
	}
}

// TestWorldPlanUnevenNodes: nodes with different worker counts get consecutive global ranks (torchrun's
// assignment), not node*k+local.
func TestWorldPlanUnevenNodes(t *testing.T) {
	h, err := Detect(context.Background(), Options{Device: "cpu", LookupEnv: envOf(nil), SysfsRoot: t.TempDir(), DevRoot: t.TempDir()})
	must(t, err)
	w := World{NodeRank: 1, Nodes: []WorldNode{{Host: "a", LocalWorkers: 3}, {Host: "b", LocalWorkers: 1}, {Host: "c", LocalWorkers: 2}}}
	p, err := NewPlan(h, Request{NProcs: 1}, w)
	must(t, err)
	var ranks []int
	for _, wk := range p.Local(2) {
		ranks = append(ranks, wk.Rank)
	}
	if len(p.Workers) != 6 || !slices.Equal(ranks, []int{4, 5}) || p.Local(1)[0].Rank != 3 {
		t.Fatalf("workers %+v", p.Workers)
	}
}

// TestSpreadGivesEveryNodeTheSplit: a ready plan (made by hand, not detected) spread over an agreed world gives
// every node its agreed number of workers with consecutive global ranks and the split (env) of the plan's node;
// the zero World is the plan itself.
func TestSpreadGivesEveryNodeTheSplit(t *testing.T) {
	p, err := CPUPlan(2)
	if err != nil {
		t.Fatal(err)
	}
	p.Workers[1].Env["MARK"] = "second"
	if got := p.Spread(0, World{}); got != p {
		t.Fatal("the zero World is not the plan itself")
	}
	w := World{NodeRank: 1, Nodes: []WorldNode{{Host: "a", Addr: "10.0.0.1", LocalWorkers: 2}, {Host: "b", Addr: "10.0.0.2", LocalWorkers: 3}}}
	got := p.Spread(0, w)
	if len(got.Workers) != 5 || len(got.Nodes) != 2 || got.Nodes[1].Host != "10.0.0.2" {
		t.Fatalf("spread over 2+3 workers: %d workers, nodes %+v", len(got.Workers), got.Nodes)
	}
	for i, wk := range got.Workers {
		node, lr := 0, i
		if i >= 2 {
			node, lr = 1, i-2
		}
		if wk.Rank != i || wk.NodeRank != node || wk.LocalRank != lr || len(wk.Replicas) != 1 || wk.Replicas[0] != i {
			t.Errorf("worker %d: %+v", i, wk)
		}
		if want := map[int]string{1: "second"}[lr]; wk.Env["MARK"] != want {
			t.Errorf("worker %d (local rank %d): MARK=%q, want %q (its local rank's env in the plan)", i, lr, wk.Env["MARK"], want)
		}
	}
	got.Workers[1].Env["MARK"] = "changed"
	if p.Workers[1].Env["MARK"] != "second" {
		t.Error("the spread plan shares its env maps with the ready plan")
	}
}
