package rendezvous

import (
	"context"
	"errors"
	"reflect"
	"testing"
)

// TestLookup: every backend name (torchrun's aliases included) finds the backend with its capabilities, which
// callers decide by instead of the name; an unknown name is an ErrConfig error naming the backend.
func TestLookup(t *testing.T) {
	withEndpoint, bare := &Config{Endpoint: "127.0.0.1:29400", NNodes: 2, NodeRank: 1}, &Config{NNodes: 2, NodeRank: -1}
	for _, tc := range []struct {
		name                     string
		solo, elastic            bool
		hostsBare, hostsEndpoint bool // NeedsHosts without and with an endpoint
		namesBare, namesEndpoint bool
		port                     int
	}{
		{"", true, false, false, false, false, false, DefaultPort},
		{BackendStatic, false, false, true, false, true, false, DefaultPort},
		{BackendTCP, false, true, true, false, false, false, DefaultPort},
		{"c10d", false, true, true, false, false, false, DefaultPort},
		{BackendEtcd, false, true, false, false, false, false, 2379},
		{"etcd-v2", false, true, false, false, false, false, 2379},
	} {
		b, err := Lookup(tc.name)
		if err != nil {
			t.Fatalf("%q: %v", tc.name, err)
		}
		got := []any{b.Solo(), b.Elastic(), b.NeedsHosts(bare), b.NeedsHosts(withEndpoint), b.namesNodes(bare), b.namesNodes(withEndpoint), b.port()}
		want := []any{tc.solo, tc.elastic, tc.hostsBare, tc.hostsEndpoint, tc.namesBare, tc.namesEndpoint, tc.port}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: solo, elastic, needs hosts, names nodes, port %v; want %v", tc.name, got, want)
		}
	}
	// tcp: one node without an endpoint takes loopback; static: a given rank and endpoint need no host list.
	if b, _ := Lookup(BackendTCP); b.NeedsHosts(&Config{NNodes: 1}) {
		t.Error("tcp of one node needs a host list")
	}
	if b, _ := Lookup(BackendStatic); !b.NeedsHosts(&Config{Endpoint: "127.0.0.1:29400", NodeRank: -1}) {
		t.Error("static without a node rank needs no host list")
	}
	_, err := Lookup("zookeeper")
	var e *Error
	if !errors.Is(err, ErrConfig) || !errors.As(err, &e) || e.Field != FieldBackend || e.Value != "zookeeper" {
		t.Errorf("unknown backend: %v", err)
	}
}

// TestSolo: the world of one (no backend) agrees at once on the member as given, its barrier is open, its exchange
// returns what this node published, and closing it ends Failures and Done; a world of more nodes is refused.
func TestSolo(t *testing.T) {
	ctx := context.Background()
	r, err := New(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.NamesNodes() || r.Endpoint() != "" || r.Server() != nil {
		t.Fatalf("world of one: names nodes %v, endpoint %q, server %v", r.NamesNodes(), r.Endpoint(), r.Server())
	}
	m := Member{Instance: "i", Host: "h", Addr: "127.0.0.1", LocalWorkers: 4, Accelerator: "cpu", RunID: "r", Generation: 2, Rank: -1}
	s, err := r.Join(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	want := &Assignment{RunID: "r", Generation: 2, Accelerator: "cpu", NNodes: 1, WorldSize: 4, NumSlices: 1, Ports: map[string]int{},
		Layout: []Span{{Nodes: 1, LocalWorkers: 4}}, Nodes: []Node{{Host: "h", Addr: "127.0.0.1", Instance: "i", LocalWorkers: 4}}}
	if a := s.Assignment(); !reflect.DeepEqual(a, want) {
		t.Errorf("assignment %+v, want %+v", a, want)
	}
	s.Assignment().Nodes[0].Host = "changed"
	if s.Assignment().Nodes[0].Host != "h" {
		t.Error("Assignment is not a copy")
	}
	if err := s.Barrier(ctx, "start"); err != nil {
		t.Error(err)
	}
	if err := s.Publish(ctx, "k", []byte("v")); err != nil {
		t.Error(err)
	}
	if got, err := s.Gather(ctx, "k"); err != nil || !reflect.DeepEqual(got, map[int][]byte{0: []byte("v")}) {
		t.Errorf("gather %v, %v", got, err)
	}
	if n, err := s.Waiting(ctx); n != 0 || err != nil {
		t.Errorf("waiting %d, %v", n, err)
	}
	if err := errors.Join(s.Fail(ctx, Failure{Reason: "x"}), s.Finish(ctx, 0), s.Leave(ctx), s.Err()); err != nil {
		t.Error(err)
	}
	if err := errors.Join(s.Close(), s.Close()); err != nil {
		t.Error(err)
	}
	if _, open := <-s.Failures(); open {
		t.Error("Failures still open after Close")
	}
	<-s.Done()
	if err := s.Err(); !errors.Is(err, ErrClosed) {
		t.Errorf("Err after Close: %v", err)
	}
	for _, c := range []Config{{NNodes: 2, NodeRank: -1}, {NodeRank: 1}} {
		if _, err := New(ctx, c); !errors.Is(err, ErrConfig) {
			t.Errorf("world of one with %+v: %v", c, err)
		}
	}
}
