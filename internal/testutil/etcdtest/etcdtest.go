// Package etcdtest starts real etcd servers (go.etcd.io/etcd/server/v3/embed) inside a test binary, configured
// for a slow, loaded machine. It is a package of its own so that only the test binaries that need an etcd link
// its server. Like net/http/httptest it is for tests only.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"tpurun/internal/testutil"
)

// Raft timing for a machine whose two cores are shared with other test binaries: etcd's own defaults (a 100 ms
// heartbeat, a 1 s election timeout). With 20 ms / 200 ms a member that is not scheduled for 200 ms starts an
// election, and the cluster spends a loaded test run without a leader ("etcdserver: no leader").
const (
	tickMs     = 100
	electionMs = 1000
)

// Cluster is a real etcd cluster of one or more members in this process (temp dirs, free loopback ports).
type Cluster struct {
	t         testing.TB
	cfgs      []*embed.Config
	members   []*embed.Etcd
	endpoints []string
}

// Start starts an n-member cluster and returns once it has a leader and answers a read through every member; it
// is stopped at cleanup. An embedded etcd is a heavy test (testutil.Heavy): Start takes the slot for t.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	testutil.Heavy(t)
	return start(t, n)
}

// StartOutsideHeavy is Start without the suite's heavy slot, for a test binary that bounds its own load and would
// otherwise queue its etcd cases behind every other heavy test of the suite, past go test's time limit (the port of
// PyTorch's launcher tests, internal/testutil/porttest).
func StartOutsideHeavy(t testing.TB, n int) *Cluster {
	t.Helper()
	return start(t, n)
}

func start(t testing.TB, n int) *Cluster {
	t.Helper()
	// A free port is free when it is picked, not when etcd binds it: on a loaded machine another process can take
	// it in between (seen once in 20 runs of TestEtcd under two CPU hogs: "bind: address already in use"). Such a
	// start is undone and tried again on new ports.
	for try := 1; ; try++ {
		c, err := tryStart(t, n)
		if err != nil {
			if !errors.Is(err, syscall.EADDRINUSE) || try == 5 {
				t.Fatal(err)
			}
			t.Logf("%v: trying again on new ports", err)
			continue
		}
		t.Cleanup(c.stop)
		for i, e := range c.members {
			testutil.Done(t, fmt.Sprintf("etcd member %d ready", i), e.Server.ReadyNotify())
		}
		for i := range c.members {
			c.WaitServing(i)
		}
		return c
	}
}

// tryStart starts the members on ports picked now; on an error it closes the members that started.
func tryStart(t testing.TB, n int) (*Cluster, error) {
	t.Helper()
	var peers []string
	cfgs := make([]*embed.Config, n)
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = t.TempDir()
		cu := url.URL{Scheme: "http", Host: testutil.FreeEndpoint(t)}
		pu := url.URL{Scheme: "http", Host: testutil.FreeEndpoint(t)}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
		cfg.LogLevel = "panic"
		cfg.TickMs, cfg.ElectionMs = tickMs, electionMs
		cfg.UnsafeNoFsync = true
		peers = append(peers, cfg.Name+"="+pu.String())
		cfgs[i] = cfg
	}
	c := &Cluster{t: t, cfgs: cfgs, members: make([]*embed.Etcd, n)}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(peers, ",")
		c.endpoints = append(c.endpoints, cfg.ListenClientUrls[0].Host)
		wg.Go(func() { c.members[i], errs[i] = embed.StartEtcd(cfg) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("etcd member %d: %w", i, err)
		}
	}
	return c, nil
}

// StartOne starts a one-member etcd (see Start) and returns its client endpoint, host:port.
func StartOne(t testing.TB) string {
	t.Helper()
	return Start(t, 1).Endpoint()
}

// Endpoint is the client endpoints of the live members, comma-separated (the rendezvous's --rdzv-endpoint).
func (c *Cluster) Endpoint() string { return strings.Join(c.Endpoints(), ",") }

// Endpoints lists the client endpoint of every live member.
func (c *Cluster) Endpoints() []string {
	var out []string
	for i, e := range c.members {
		if e != nil {
			out = append(out, c.endpoints[i])
		}
	}
	return out
}

// WaitServing waits until member i knows a leader and answers a linearizable read (which needs that leader).
func (c *Cluster) WaitServing(i int) {
	c.t.Helper()
	waitRead(c.t, c.endpoints[i], fmt.Sprintf("etcd member %d to have a leader and answer a read", i), func() error {
		if c.members[i].Server.Leader() == 0 {
			return fmt.Errorf("no leader yet")
		}
		return nil
	})
}

// waitRead waits until ready holds and the etcd at endpoint answers a linearizable read.
func waitRead(t testing.TB, endpoint, what string, ready func() error) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: testutil.Deadline(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd at %s: client: %v", endpoint, err)
	}
	defer cli.Close()
	testutil.WaitFor(t, what, func() error {
		if err := ready(); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := cli.Get(ctx, "etcdtest/ready")
		return err
	})
}

// Leader is the index of the member that leads the cluster now, -1 when none does.
func (c *Cluster) Leader() int {
	for i, e := range c.members {
		if e != nil && e.Server.Leader() == e.Server.MemberID() {
			return i
		}
	}
	return -1
}

// KillMember stops member i at once, as a crash would: a leader hands over nothing, and the others are without a
// leader until they have elected one (an election timeout or more), answering "no leader" meanwhile.
func (c *Cluster) KillMember(i int) {
	if c.members[i] != nil {
		c.members[i].Server.HardStop()
		c.StopMember(i)
	}
}

// RestartMember starts member i again, from its data, after StopMember or KillMember.
func (c *Cluster) RestartMember(i int) {
	c.t.Helper()
	if c.members[i] != nil {
		c.t.Fatalf("etcd member %d is running", i)
	}
	e, err := embed.StartEtcd(c.cfgs[i])
	if err != nil {
		c.t.Fatalf("restart etcd member %d: %v", i, err)
	}
	c.members[i] = e
	testutil.Done(c.t, fmt.Sprintf("etcd member %d ready again", i), e.Server.ReadyNotify())
}

// StopMember stops member i and waits until it has stopped. It does not wait for the others to elect a new
// leader when i was the leader: a test sees the cluster as a client would, election included (WaitServing waits).
func (c *Cluster) StopMember(i int) {
	if c.members[i] != nil {
		c.members[i].Close()
		<-c.members[i].Server.StopNotify()
		c.members[i] = nil
	}
}

func (c *Cluster) stop() {
	for i := range c.members {
		c.StopMember(i)
	}
}
