package static

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"tpurun/internal/failure"
	"tpurun/internal/testutil"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
)

// fakeDNS is a DNS server for a Resolver (Config.Resolver) that knows the names published so far, as the headless
// service of a JobSet publishes its pods as they start; every other name is not found (NXDOMAIN).
type fakeDNS struct {
	mu      sync.Mutex
	names   map[string]netip.Addr
	lookups map[string]int
}

func newFakeDNS() *fakeDNS {
	return &fakeDNS{names: map[string]netip.Addr{}, lookups: map[string]int{}}
}

func (f *fakeDNS) publish(name string, a netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.names[name] = a
}

func (f *fakeDNS) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lookups[name]
}

// resolver is a pure Go resolver whose every query is served by f, over an in-memory stream (DNS over TCP framing).
func (f *fakeDNS) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, s := net.Pipe()
		go f.serve(s)
		return c, nil
	}}
}

func (f *fakeDNS) serve(c net.Conn) {
	defer c.Close()
	for {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		r := f.answer(q)
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(r))), r...)); err != nil {
			return
		}
	}
}

// answer answers query q (one question): the name's IPv4 address to an A question, no address to any other, not
// found for a name not published.
func (f *fakeDNS) answer(q []byte) []byte {
	if len(q) < 12 {
		return nil
	}
	var labels []string
	i := 12
	for i < len(q) && q[i] != 0 {
		n := int(q[i])
		if i+1+n > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+n]))
		i += 1 + n
	}
	end := i + 5 // the root label, type and class
	if end > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i+1:])
	name := strings.ToLower(strings.Join(labels, "."))
	f.mu.Lock()
	f.lookups[name]++
	a, ok := f.names[name]
	f.mu.Unlock()
	r := append([]byte(nil), q[:12]...)
	flags := uint16(0x8180) // a response, recursion desired and available
	if !ok {
		flags |= 3 // NXDOMAIN
	}
	binary.BigEndian.PutUint16(r[2:], flags)
	binary.BigEndian.PutUint16(r[4:], 1) // the question
	binary.BigEndian.PutUint16(r[8:], 0)
	binary.BigEndian.PutUint16(r[10:], 0)
	r = append(r, q[12:end]...)
	if ok && qtype == 1 && a.Is4() { // A
		binary.BigEndian.PutUint16(r[6:], 1)
		r = append(r, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4)
		r = append(r, a.AsSlice()...)
	} else {
		binary.BigEndian.PutUint16(r[6:], 0)
	}
	return r
}

// TestEndpointNotResolvedYet: a static world whose endpoint is node 0's pod name, before the headless service
// publishes it: node 0 waits for its own name before it binds, node 1 retries its dial, each saying so in one log
// line, and once the name resolves both join.
func TestEndpointNotResolvedYet(t *testing.T) {
	dns := newFakeDNS()
	const name = "job-slice-0-0.job"
	_, port, _ := strings.Cut(rdzvtest.FreeAddr(t), ":")
	hosts := []string{name, "job-slice-0-1.job"}
	core, logs := observer.New(zapcore.InfoLevel)
	ctx := context.Background()
	sess := make([]rendezvous.Session, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			r, err := rendezvous.New(ctx, rendezvous.Config{Backend: Name, Hosts: hosts, NodeRank: i, Token: "s3cret-token", RunID: "job",
				Timeout: rdzvtest.Never(), Resolver: dns.resolver(), Conf: map[string]string{"port": port},
				Logger: zap.New(core).With(zap.Int("node", i))})
			if err != nil {
				errs[i] = err
				return
			}
			t.Cleanup(func() { r.Close() })
			if sess[i], errs[i] = r.Join(ctx, rendezvous.Member{LocalWorkers: 4, Accelerator: "v4-16", Rank: -1}); errs[i] == nil {
				t.Cleanup(func() { sess[i].Close() })
			}
		})
	}
	waiting := func() int {
		return logs.FilterMessageSnippet("does not resolve yet").Len()
	}
	testutil.Eventually(t, "both nodes to say the endpoint does not resolve yet", func() bool { return waiting() == 2 })
	testutil.Eventually(t, "a node to look the name up again", func() bool { return dns.count(name) > 4 })
	dns.publish(name, netip.MustParseAddr("127.0.0.1"))
	joined := make(chan struct{})
	go func() { wg.Wait(); close(joined) }()
	testutil.Done(t, "both nodes to join once the name resolves", joined)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	if n := waiting(); n != 2 {
		t.Fatalf("%d lines said the endpoint does not resolve yet, want one per node", n)
	}
	if a := sess[1].Assignment(); a.NodeRank != 1 || a.MasterAddr != name {
		t.Fatalf("node 1: %+v", a)
	}
}

// TestEndpointNeverResolves: a name that never resolves ends the wait at the join timeout, on the node hosting the
// server (New) and on a node dialling it (Join), with an ErrUnresolved error (an ErrTimeout) naming the endpoint
// and the time tried.
func TestEndpointNeverResolves(t *testing.T) {
	dns := newFakeDNS()
	timeout := testutil.Scaled(300 * time.Millisecond)
	ep := "nowhere.job:29400"
	ctx := context.Background()
	_, err := rendezvous.New(ctx, rendezvous.Config{Backend: Name, Endpoint: ep, NNodes: 2, NodeRank: 0, Token: "t", Timeout: timeout, Resolver: dns.resolver()})
	rdzvtest.RdzvErr(t, err, rendezvous.ErrTimeout)
	e := rdzvtest.RdzvErr(t, err, rendezvous.ErrUnresolved)
	if e.Field != string(failure.RendezvousEndpoint) || e.Value != ep || !strings.Contains(e.Detail, "did not resolve within") {
		t.Fatalf("hosting node: %v, want the endpoint named, and how long it waited", err)
	}
	r, err := rendezvous.New(ctx, rendezvous.Config{Backend: Name, Endpoint: ep, NNodes: 2, NodeRank: 1, Token: "t", Timeout: timeout, Resolver: dns.resolver()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Join(ctx, rendezvous.Member{Host: "h1", LocalWorkers: 1, Rank: -1})
	rdzvtest.RdzvErr(t, err, rendezvous.ErrTimeout)
	e = rdzvtest.RdzvErr(t, err, rendezvous.ErrUnresolved)
	if e.Field != string(failure.RendezvousEndpoint) || e.Value != ep || !strings.Contains(e.Detail, "did not resolve within") {
		t.Fatalf("joining node: %v, want the endpoint named, and how long it tried", err)
	}
	if n := dns.count("nowhere.job"); n < 4 {
		t.Fatalf("the name was looked up %d times, want retries", n)
	}
}
