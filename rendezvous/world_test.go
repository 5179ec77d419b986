package rendezvous

import (
	"errors"
	"reflect"
	"testing"
)

func TestAssignRanksAndSlices(t *testing.T) {
	mk := func(host string, slice, rank int) Member {
		return Member{Instance: host, Host: host, Addr: host + ".ip", LocalWorkers: 4, Accelerator: "v4-16", RunID: "r",
			SliceID: slice, NumSlices: 2, Rank: rank, Ports: map[string]int{PortMaster: 1234, PortMegascale: 8081}}
	}
	// arrival order: slice 1 first; one node asks for rank 3
	ms := []Member{mk("b1", 1, -1), mk("a0", 0, -1), mk("b0", 1, 3), mk("a1", 0, -1)}
	ranks, err := assignRanks(ms, 4)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{2, 0, 3, 1}; !reflect.DeepEqual(ranks, want) {
		t.Fatalf("ranks %v, want %v (slice 0 first, requested rank kept)", ranks, want)
	}
	a := buildAssignment(ms, ranks)
	if a.MasterAddr != "a0.ip" || a.MasterPort() != 1234 || a.MegascaleCoordinator != "a0.ip:8081" || a.NumSlices != 2 || a.WorldSize != 16 {
		t.Fatalf("%+v", a)
	}
	if got := a.Addrs(); !reflect.DeepEqual(got, []string{"a0.ip", "a1.ip", "b1.ip", "b0.ip"}) {
		t.Fatalf("addrs %v", got)
	}
	if a.Nodes[3].FirstRank != 12 {
		t.Fatalf("first rank of node 3: %d", a.Nodes[3].FirstRank)
	}
	// the same rank requested twice
	_, err = assignRanks([]Member{mk("x", 0, 1), mk("y", 0, 1)}, 2)
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrDuplicateNode) || len(e.Nodes) != 2 {
		t.Fatalf("%v", err)
	}
}

func TestAgreeNamesTheOddNode(t *testing.T) {
	m := func(host, acc string, workers int) Member {
		return Member{Instance: host, Host: host, Accelerator: acc, LocalWorkers: workers, RunID: "r"}
	}
	cases := []struct {
		ms  []Member
		odd string
	}{
		{[]Member{m("a", "v4-32", 4), m("b", "v4-32", 4), m("c", "v5p-32", 4)}, "c"},
		{[]Member{m("a", "v4-32", 8), m("b", "v4-32", 4), m("c", "v4-32", 4)}, "a"},
		{[]Member{m("a", "v4-32", 4), m("b", "v4-16", 4)}, "b"}, // a tie: the lowest rank's value wins
	}
	for i, tc := range cases {
		ranks := make([]int, len(tc.ms))
		for j := range ranks {
			ranks[j] = j
		}
		err := agree(tc.ms, ranks, 0)
		var e *MismatchError
		if !errors.As(err, &e) || !errors.Is(err, ErrMismatch) || len(e.Odd()) != 1 || e.Odd()[0].Host != tc.odd {
			t.Errorf("case %d: %v, want %s named", i, err, tc.odd)
		}
	}
	if err := agree([]Member{m("a", "x", 1), m("b", "x", 1)}, []int{0, 1}, 0); err != nil {
		t.Fatal(err)
	}
}
