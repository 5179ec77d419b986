package rendezvous_test

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"tpurun/internal/failure"
	"tpurun/internal/testutil"
	"tpurun/rendezvous"
	"tpurun/rendezvous/etcd"
	"tpurun/rendezvous/static"
	"tpurun/rendezvous/tcp"
)

// TestLookup: every backend name (torchrun's aliases included) finds the backend with its capabilities, which
// callers decide by instead of the name; an unknown name is an ErrConfig error naming the backend.
func TestLookup(t *testing.T) {
	withEndpoint, bare := &rendezvous.Config{Endpoint: "127.0.0.1:29400", NNodes: 2, NodeRank: 1}, &rendezvous.Config{NNodes: 2, NodeRank: -1}
	for _, tc := range []struct {
		name                     string
		solo, elastic            bool
		hostsBare, hostsEndpoint bool // NeedsHosts without and with an endpoint
		namesBare, namesEndpoint bool
		port                     int
	}{
		{"", true, false, false, false, false, false, rendezvous.DefaultPort},
		{static.Name, false, false, true, false, true, false, rendezvous.DefaultPort},
		{tcp.Name, false, true, true, false, false, false, rendezvous.DefaultPort},
		{"c10d", false, true, true, false, false, false, rendezvous.DefaultPort},
		{etcd.Name, false, true, false, false, false, false, 2379},
		{"etcd-v2", false, true, false, false, false, false, 2379},
	} {
		b, err := rendezvous.Lookup(tc.name)
		if err != nil {
			t.Fatalf("%q: %v", tc.name, err)
		}
		got := []any{b.Solo(), b.Elastic(), b.NeedsHosts(bare), b.NeedsHosts(withEndpoint), b.NamesNodes(bare), b.NamesNodes(withEndpoint), b.Port()}
		want := []any{tc.solo, tc.elastic, tc.hostsBare, tc.hostsEndpoint, tc.namesBare, tc.namesEndpoint, tc.port}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: solo, elastic, needs hosts, names nodes, port %v; want %v", tc.name, got, want)
		}
	}
	// tcp: one node without an endpoint takes loopback; static: a given rank and endpoint need no host list.
	if b, _ := rendezvous.Lookup(tcp.Name); b.NeedsHosts(&rendezvous.Config{NNodes: 1}) {
		t.Error("tcp of one node needs a host list")
	}
	if b, _ := rendezvous.Lookup(static.Name); !b.NeedsHosts(&rendezvous.Config{Endpoint: "127.0.0.1:29400", NodeRank: -1}) {
		t.Error("static without a node rank needs no host list")
	}
	_, err := rendezvous.Lookup("zookeeper")
	var e *rendezvous.Error
	if !errors.Is(err, rendezvous.ErrConfig) || !errors.As(err, &e) || e.Field != string(failure.RendezvousBackend) || e.Value != "zookeeper" {
		t.Errorf("unknown backend: %v", err)
	}
}

// TestSolo: the world of one (no backend) agrees at once on the member as given, its barrier is open, its exchange
// returns what this node published, and closing it ends Failures and Done; a world of more nodes is refused.
func TestSolo(t *testing.T) {
	ctx := context.Background()
	r, err := rendezvous.New(ctx, rendezvous.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.NamesNodes() || r.Endpoint() != "" || tcp.HostedServer(r) != nil {
		t.Fatalf("world of one: names nodes %v, endpoint %q, server %v", r.NamesNodes(), r.Endpoint(), tcp.HostedServer(r))
	}
	m := rendezvous.Member{Instance: "i", Host: "h", Addr: "127.0.0.1", LocalWorkers: 4, Accelerator: "cpu", RunID: "r", Generation: 2, Rank: -1}
	s, err := r.Join(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	want := &rendezvous.Assignment{RunID: "r", Generation: 2, Accelerator: "cpu", NNodes: 1, WorldSize: 4, NumSlices: 1, Ports: map[string]int{},
		Layout: []rendezvous.Span{{Nodes: 1, LocalWorkers: 4}}, Nodes: []rendezvous.Node{{Host: "h", Addr: "127.0.0.1", Instance: "i", LocalWorkers: 4}}}
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
	if err := errors.Join(s.Fail(ctx, rendezvous.Failure{Reason: "x"}), s.Finish(ctx, 0), s.Leave(ctx), s.Err()); err != nil {
		t.Error(err)
	}
	if err := errors.Join(s.Close(), s.Close()); err != nil {
		t.Error(err)
	}
	if _, open := <-s.Failures(); open {
		t.Error("Failures still open after Close")
	}
	<-s.Done()
	if err := s.Err(); !errors.Is(err, rendezvous.ErrClosed) {
		t.Errorf("Err after Close: %v", err)
	}
	for _, c := range []rendezvous.Config{{NNodes: 2, NodeRank: -1}, {NodeRank: 1}} {
		if _, err := rendezvous.New(ctx, c); !errors.Is(err, rendezvous.ErrConfig) {
			t.Errorf("world of one with %+v: %v", c, err)
		}
	}
}

// TestUnknownBackendNamesItsPackage: a program that names one of tpurun's backends without importing its package
// is told which package to import (and that none is registered), by an error matching ErrConfig; a name that no
// package registers is told none is. The program is built on its own: this test's binary links every backend.
func TestUnknownBackendNamesItsPackage(t *testing.T) {
	dir := t.TempDir()
	if err := testutil.BuildStatic(dir, "./testdata/nobackend"); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(dir, "nobackend"), "tcp", "c10d", "etcd", "static", "zookeeper").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := []string{
		`backend "tcp": unknown; import _ "tpurun/rendezvous/tcp" to register it (registered: none)`,
		`backend "c10d": unknown; import _ "tpurun/rendezvous/tcp" to register it (registered: none)`,
		`backend "etcd": unknown; import _ "tpurun/rendezvous/etcd" to register it (registered: none)`,
		`backend "static": unknown; import _ "tpurun/rendezvous/static" to register it (registered: none)`,
		`backend "zookeeper": unknown, and no backend is registered: import one (_ "tpurun/rendezvous/tcp", static or etcd)`,
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, "true ") || !strings.HasSuffix(l, want[i]) {
			t.Errorf("got %q, want an ErrConfig error ending %q", l, want[i])
		}
	}
}

// TestRegistry: the backends register themselves once each, under their names and torchrun's aliases, and the
// help text and messages name them from the registry; a name registered twice is a programming error.
func TestRegistry(t *testing.T) {
	var names []string
	for _, r := range rendezvous.Backends() {
		names = append(names, r.Name)
	}
	if want := []string{etcd.Name, static.Name, tcp.Name}; !reflect.DeepEqual(names, want) {
		t.Errorf("backends %v, want %v", names, want)
	}
	if got, want := rendezvous.Names(), "etcd (etcd-v2), static or tcp (c10d)"; got != want {
		t.Errorf("Names() = %q, want %q", got, want)
	}
	if _, err := rendezvous.Lookup("zookeeper"); err == nil || !strings.Contains(err.Error(), rendezvous.Names()) {
		t.Errorf("unknown backend: %v does not name the backends", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("a second registration of c10d did not panic")
		}
	}()
	b, _ := rendezvous.Lookup(tcp.Name)
	rendezvous.Register(rendezvous.Registration{Name: "c10d", Backend: b})
}
