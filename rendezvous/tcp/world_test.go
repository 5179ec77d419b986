package tcp

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"tpurun/rendezvous"
)

// TestSharesEncodedOnce: every node's share as the server sends it, from the parts encoded once for the whole
// world (the common part, each slice's nodes), is the share itself: in a world of CPU or GPU hosts (its own node),
// of two TPU slices (its slice's nodes) and of a pod named by its host list (no nodes).
func TestSharesEncodedOnce(t *testing.T) {
	mk := func(i, slice int, uneven bool) rendezvous.Member {
		h := fmt.Sprintf("h%d", i)
		return rendezvous.Member{Instance: h, Host: h, Addr: h, LocalWorkers: 4 + i%2*4*btoi(uneven), RunID: "r", Accelerator: "v5p-32",
			SliceID: slice, NumSlices: 2, UnevenWorkers: uneven, Role: "trainer", Ports: map[string]int{rendezvous.PortMaster: 1, rendezvous.PortMegascale: 8081}}
	}
	for _, tc := range []struct {
		name   string
		uneven bool
		named  bool
	}{{"uneven", true, false}, {"slices", false, false}, {"named", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 8
			ms, ranks, hosts := make([]rendezvous.Member, n), make([]int, n), make([]string, n)
			for i := range ms {
				ms[i], ranks[i], hosts[i] = mk(i, i/4, tc.uneven), i, fmt.Sprintf("h%d", i)
			}
			w := rendezvous.AgreeWorld(ms, ranks)
			named := tc.named && w.NamedBy(hosts)
			if named != tc.named {
				t.Fatalf("named %v, want %v", named, tc.named)
			}
			sh := w.Encode(named)
			if !sh.InParts() {
				t.Fatal("the shares are not laid out in parts")
			}
			for r := range n {
				body := append(replyHead(uint64(r+1), "assignment"), bytes.Join(sh.Value(r), nil)...)
				m, err := decodeMessage(append(body, closeBrace...))
				if err != nil {
					t.Fatalf("node rank %d: %v\n%s", r, err, body)
				}
				if want := w.Share(r, named); m.ID != uint64(r+1) || !reflect.DeepEqual(m.Assignment, want) {
					t.Fatalf("node rank %d received\n%+v\nwant\n%+v", r, m.Assignment, want)
				}
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
