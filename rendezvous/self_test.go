package rendezvous_test

import (
	"context"
	"testing"

	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
	"tpurun/rendezvous/static"
	"tpurun/rendezvous/tcp"
)

// TestSelf: a node's Member as tpurun completes it (the launcher and the benchmark both call Rendezvous.Self): on
// tcp a CPU or GPU host names itself with its pid, a node with a rank with "#rank", and takes its address toward a
// loopback endpoint; a name and address given are kept; a static world named by its host list leaves both to the
// list.
func TestSelf(t *testing.T) {
	ctx := context.Background()
	host := func() (string, error) { return "box", nil }
	r, err := rendezvous.New(ctx, rendezvous.Config{Backend: tcp.Name, Endpoint: rdzvtest.FreeAddr(t), NNodes: 2, NodeRank: -1, RunID: "r",
		Conf: map[string]string{"is_host": "false"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, tc := range []struct {
		m          rendezvous.Member
		host, addr string
	}{
		{rendezvous.Member{Rank: -1, UnevenWorkers: true}, "box_42", "127.0.0.1"},
		{rendezvous.Member{Rank: 3}, "box#3", "127.0.0.1"},
		{rendezvous.Member{Rank: -1}, "box", "127.0.0.1"},
		{rendezvous.Member{Rank: -1, Host: "h", Addr: "10.0.0.1"}, "h", "10.0.0.1"},
	} {
		m, err := r.Self(tc.m, host, 42)
		if err != nil || m.Host != tc.host || m.Addr != tc.addr {
			t.Errorf("Self(%+v) = host %q addr %q (%v), want %q %q", tc.m, m.Host, m.Addr, err, tc.host, tc.addr)
		}
	}
	named, err := rendezvous.New(ctx, rendezvous.Config{Backend: static.Name, Hosts: []string{"127.0.0.1", "127.0.0.2"}, NodeRank: 1, RunID: "r",
		Conf: map[string]string{"port": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer named.Close()
	if m, err := named.Self(rendezvous.Member{Rank: 1}, host, 42); err != nil || m.Host != "" || m.Addr != "" {
		t.Errorf("a static world named by its host list: host %q addr %q (%v), want both left to the list", m.Host, m.Addr, err)
	}
}
