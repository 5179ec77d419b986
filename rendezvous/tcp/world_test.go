package tcp

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/agree"
)

// TestSharesEncodedOnce: every node's share as the server sends it, from the parts encoded once for the whole
// world (the common part, each slice's table), is the share itself once received: in a world of CPU or GPU hosts
// (its own node), of two TPU slices (its slice's nodes, from the slice's table) and of a pod named by its host list
// (no nodes). Every host of a slice is sent the same bytes of its table (one encoding, shared, attached raw to the
// frame), and no host is sent its slice as objects (a host of a pod of 2240 would decode 2240 of them: the square
// of the slice in all).
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
			w := agree.AgreeWorld(ms, ranks)
			named := tc.named && w.NamedBy(hosts)
			if named != tc.named {
				t.Fatalf("named %v, want %v", named, tc.named)
			}
			sh := w.Encode(named)
			if !sh.InParts() {
				t.Fatal("the shares are not laid out in parts")
			}
			tables := map[int]*byte{} // the first byte of each slice's table as sent: one encoding per slice
			for r := range n {
				parts := shareParts(uint64(r+1), sh, r)
				body := bytes.Join(parts, nil)
				m, err := readMessage(bytes.NewReader(body), DefaultMaxMessage)
				if err != nil {
					t.Fatalf("node rank %d: %v\n%s", r, err, body)
				}
				got, err := received(m)
				if err == nil && m.Table != nil {
					err = m.Table.Fill(got)
				}
				if want := w.Share(r, named); err != nil || m.ID != uint64(r+1) || !reflect.DeepEqual(got, want) {
					t.Fatalf("node rank %d received (%v)\n%+v\nwant\n%+v", r, err, got, want)
				}
				if bytes.Contains(body, []byte(`"nodes":[{`)) != tc.uneven {
					t.Fatalf("node rank %d was sent nodes as objects: %v, want %v (only its own node, in a world of CPU or GPU hosts)\n%s", r, !tc.uneven, tc.uneven, body)
				}
				table := sh.Table(r)
				if (table != nil) != (tc.name == "slices") {
					t.Fatalf("node rank %d: table %q", r, table)
				}
				if table == nil {
					continue
				}
				slice := r / 4
				if first, ok := tables[slice]; ok && first != &table[0] {
					t.Fatalf("node rank %d was sent a table of slice %d encoded apart from its slice's first host's", r, slice)
				}
				tables[slice] = &table[0]
				if !slices.ContainsFunc(parts, func(p []byte) bool { return len(p) > 0 && &p[0] == &table[0] }) {
					t.Fatalf("node rank %d: its slice's table is not among the parts sent (copied?)", r)
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
