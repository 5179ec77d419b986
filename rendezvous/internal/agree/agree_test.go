package agree

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"

	"tpurun/rendezvous"
)

func TestAssignRanksAndSlices(t *testing.T) {
	mk := func(host string, slice, rank int) rendezvous.Member {
		return rendezvous.Member{Instance: host, Host: host, Addr: host + ".ip", LocalWorkers: 4, Accelerator: "v4-16", RunID: "r",
			SliceID: slice, NumSlices: 2, Rank: rank, Ports: map[string]int{rendezvous.PortMaster: 1234, rendezvous.PortMegascale: 8081}}
	}
	// arrival order: slice 1 first; one node asks for rank 3
	ms := []rendezvous.Member{mk("b1", 1, -1), mk("a0", 0, -1), mk("b0", 1, 3), mk("a1", 0, -1)}
	ranks, err := AssignRanks(ms, 4)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{2, 0, 3, 1}; !reflect.DeepEqual(ranks, want) {
		t.Fatalf("ranks %v, want %v (slice 0 first, requested rank kept)", ranks, want)
	}
	w := AgreeWorld(ms, ranks)
	a := w.Share(3, false)
	if a.MasterAddr != "a0.ip" || a.MasterPort() != 1234 || a.MegascaleCoordinator != "a0.ip:8081" || a.NumSlices != 2 || a.WorldSize != 16 || a.NNodes != 4 {
		t.Fatalf("%+v", a)
	}
	// a TPU node's share names its slice's nodes, in rank order: slice 1 is ranks 2 and 3
	if got := a.Addrs(); !reflect.DeepEqual(got, []string{"b1.ip", "b0.ip"}) {
		t.Fatalf("addrs %v", got)
	}
	if got := w.Share(0, false).Addrs(); !reflect.DeepEqual(got, []string{"a0.ip", "a1.ip"}) {
		t.Fatalf("slice 0's addrs %v", got)
	}
	if s := a.Self(); s.FirstRank != 12 || s.Host != "b0" || s.Rank != 3 {
		t.Fatalf("node 3: %+v", s)
	}
	if want := []rendezvous.Span{{Nodes: 2, LocalWorkers: 4, SliceID: 0}, {Nodes: 2, LocalWorkers: 4, SliceID: 1}}; !reflect.DeepEqual(a.Layout, want) {
		t.Fatalf("layout %+v, want %+v", a.Layout, want)
	}
	if all := a.AllNodes(); len(all) != 4 || all[1].FirstRank != 4 || all[1].SliceID != 0 || all[1].Host != "" || all[2].Host != "b1" {
		t.Fatalf("all nodes %+v: ranks and slices for every node, names for the share's", all)
	}
	// the same rank requested twice
	_, err = AssignRanks([]rendezvous.Member{mk("x", 0, 1), mk("y", 0, 1)}, 2)
	var e *rendezvous.Error
	if !errors.As(err, &e) || !errors.Is(err, rendezvous.ErrDuplicateNode) || len(e.Nodes) != 2 {
		t.Fatalf("%v", err)
	}
}

// TestShareIsWhatANodeNeeds: a node's share of a world of CPU or GPU hosts names only itself, and of a static world
// named by a host list none (the receiver names them from its list), so it does not grow with the world.
func TestShareIsWhatANodeNeeds(t *testing.T) {
	hosts := make([]string, 1000)
	ms := make([]rendezvous.Member, len(hosts))
	ranks := make([]int, len(hosts))
	for i := range ms {
		hosts[i] = fmt.Sprintf("h%d", i)
		ms[i] = rendezvous.Member{Instance: hosts[i], Host: hosts[i], Addr: hosts[i], LocalWorkers: 8, RunID: "r", Role: "trainer",
			UnevenWorkers: true, Ports: map[string]int{rendezvous.PortMaster: 1}}
		ranks[i] = i
	}
	ms[500].LocalWorkers = 2 // one odd node: three spans
	a := AgreeWorld(ms, ranks).Share(700, false)
	if len(a.Nodes) != 1 || a.Self().FirstRank != 500*8+2+199*8 || len(a.Layout) != 3 || a.WorldSize != 999*8+2 {
		t.Fatalf("uneven world's share: %d nodes, self %+v, layout %+v, world size %d", len(a.Nodes), a.Self(), a.Layout, a.WorldSize)
	}
	for i := range ms {
		ms[i].UnevenWorkers, ms[i].LocalWorkers = false, 4
	}
	w := AgreeWorld(ms, ranks)
	if !w.NamedBy(hosts) {
		t.Fatal("the host list names every node")
	}
	a = w.Share(7, true)
	b, err := json.Marshal(a)
	if err != nil || len(b) > 512 || len(a.Nodes) != 0 {
		t.Fatalf("a named share is %d bytes with %d nodes (%v)", len(b), len(a.Nodes), err)
	}
	NameFrom(a, hosts)
	if got := a.Addrs(); len(got) != 1000 || got[7] != "h7" || a.Self().Host != "h7" || a.Self().FirstRank != 28 {
		t.Fatalf("named from the list: %d addrs, self %+v", len(got), a.Self())
	}
}

func TestAgreeNamesTheOddNode(t *testing.T) {
	m := func(host, acc string, workers int) rendezvous.Member {
		return rendezvous.Member{Instance: host, Host: host, Accelerator: acc, LocalWorkers: workers, RunID: "r"}
	}
	cases := []struct {
		ms  []rendezvous.Member
		odd string
	}{
		{[]rendezvous.Member{m("a", "v4-32", 4), m("b", "v4-32", 4), m("c", "v5p-32", 4)}, "c"},
		{[]rendezvous.Member{m("a", "v4-32", 8), m("b", "v4-32", 4), m("c", "v4-32", 4)}, "a"},
		{[]rendezvous.Member{m("a", "v4-32", 4), m("b", "v4-16", 4)}, "b"}, // a tie: the lowest rank's value wins
	}
	for i, tc := range cases {
		ranks := make([]int, len(tc.ms))
		for j := range ranks {
			ranks[j] = j
		}
		err := Agree(tc.ms, ranks, 0)
		var e *rendezvous.MismatchError
		if !errors.As(err, &e) || !errors.Is(err, rendezvous.ErrMismatch) || len(e.Odd()) != 1 || e.Odd()[0].Host != tc.odd {
			t.Errorf("case %d: %v, want %s named", i, err, tc.odd)
		}
	}
	if err := Agree([]rendezvous.Member{m("a", "x", 1), m("b", "x", 1)}, []int{0, 1}, 0); err != nil {
		t.Fatal(err)
	}
}

// TestHostsSum: a join carries its host list's sum, which names the list (its length and CRC-32C of its names, one
// per line), and a world is named by the list only when every node's sum is the agreed nodes'.
func TestHostsSum(t *testing.T) {
	long := make([]string, 5000) // names that cross the sum's buffer
	for i := range long {
		long[i] = fmt.Sprintf("pod-%d-%s.svc", i, strings.Repeat("x", i%300))
	}
	for _, hosts := range [][]string{{"a"}, {"a", "b"}, long} {
		want := fmt.Sprintf("%d:%08x", len(hosts), crc32.Checksum([]byte(strings.Join(hosts, "\n")), crc32.MakeTable(crc32.Castagnoli)))
		if got := HostsSum(hosts); got != want {
			t.Fatalf("sum of %d hosts %s, want %s", len(hosts), got, want)
		}
	}
	if HostsSum(nil) != "" || HostsSum([]string{"a", "b"}) == HostsSum([]string{"ab"}) {
		t.Fatal("sums of no list, or of lists that join alike")
	}
}
