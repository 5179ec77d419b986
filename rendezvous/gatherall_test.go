package rendezvous_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
	"tpurun/rendezvous/tcp"
)

// TestGatherAllCarriesMoreThanAMessage: every node gets every node's data whole and in node-rank order, one node's
// 5 MiB (more than the tcp server takes in one frame: a plain Publish of it, tried last, is refused), one node's nothing and one's
// a few bytes, through as many rounds as the largest needs.
func TestGatherAllCarriesMoreThanAMessage(t *testing.T) {
	c := rdzvtest.NewCluster(t, tcp.Name, 3)
	defer c.Close()
	ctx := context.Background()
	c.Start(ctx, nil)
	c.MustJoin()
	data := [][]byte{bytes.Repeat([]byte("0123456789abcdef"), 5<<20/16), nil, []byte("node 2")}
	got := make([][][]byte, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { got[i], errs[i] = rendezvous.GatherAll(ctx, c.Sess[i], "outcome", data[i], 3) })
	}
	wg.Wait()
	for i := range 3 {
		if errs[i] != nil {
			t.Fatalf("session %d: %v", i, errs[i])
		}
		if len(got[i]) != 3 {
			t.Fatalf("session %d got %d nodes' data, want 3", i, len(got[i]))
		}
		for j := range 3 { // session j published data[j] as the node of its rank
			n := c.Sess[j].Assignment().NodeRank
			if !bytes.Equal(got[i][n], data[j]) {
				t.Errorf("session %d has %d bytes of node %d, want %d", i, len(got[i][n]), n, len(data[j]))
			}
		}
	}
	// last, as it costs node 0 its connection
	if err := c.Sess[0].Publish(ctx, "plain", data[0]); err == nil {
		t.Fatal("a plain Publish of 5 MiB was taken: the test shows nothing")
	}
}

// TestPieceSize: a piece is at most 1 MiB in all per round, 16 KiB at least and 512 KiB at most per node.
func TestPieceSize(t *testing.T) {
	for nodes, want := range map[int]int{0: 512 << 10, 1: 512 << 10, 2: 512 << 10, 4: 256 << 10, 64: 16 << 10, 4096: 16 << 10} {
		if got := rendezvous.PieceSize(nodes); got != want {
			t.Errorf("PieceSize(%d) = %d, want %d", nodes, got, want)
		}
	}
}
