package tcp

import (
	"context"
	"errors"
	"strings"
	"testing"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
)

// TestTCPWithoutEndpoint: a tcp rendezvous of several nodes without --rdzv-endpoint is a configuration error that
// says what to pass, unless a host list naming every node says which host is node 0 (then its host on
// --rdzv-conf port, default 29400); one node keeps the loopback default.
func TestTCPWithoutEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nnodes int
		conf   map[string]string
		hosts  []string
		want   string // the endpoint, or "" for a config error
		says   string // what the error must say
	}{
		{name: "no host list", nnodes: 2, says: "tcp rendezvous of 2 nodes needs an endpoint (node 0's host:port)"},
		{name: "host list", nnodes: 2, hosts: []string{"10.0.0.7", "10.0.0.8"}, want: "10.0.0.7:29400"},
		{name: "host list with port", nnodes: 2, hosts: []string{"10.0.0.7", "10.0.0.8"}, conf: map[string]string{"port": "1234"}, want: "10.0.0.7:1234"},
		{name: "one slice of several", nnodes: 4, hosts: []string{"10.0.0.7", "10.0.0.8"}, says: "has 2 hosts, not 4"},
		{name: "the environment is not read", nnodes: 2, says: "needs an endpoint"}, // TPU_WORKER_HOSTNAMES set below
		{name: "one node", nnodes: 1, want: "127.0.0.1:29400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TPU_WORKER_HOSTNAMES", "10.9.9.9,10.9.9.8")
			t.Setenv("SLURM_JOB_NODELIST", "n[1-2]")
			conf := map[string]string{"is_host": "false"} // only the endpoint is under test: bind nothing
			for k, v := range tc.conf {
				conf[k] = v
			}
			r, err := rendezvous.New(context.Background(), rendezvous.Config{Backend: Name, NNodes: tc.nnodes, NodeRank: -1, Conf: conf,
				Hosts: tc.hosts, Token: "t"}) // off-loopback endpoints need a token
			if tc.want != "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				defer r.Close()
				if r.Endpoint() != tc.want {
					t.Fatalf("endpoint %s, want %s", r.Endpoint(), tc.want)
				}
				return
			}
			if err == nil {
				r.Close()
				t.Fatalf("endpoint %s, want a configuration error", r.Endpoint())
			}
			if !errors.Is(err, rendezvous.ErrConfig) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %q, want ErrConfig saying %q", err, tc.says)
			}
			if strings.Contains(err.Error(), "rendezvous: bad rendezvous") {
				t.Fatalf("error repeats itself: %q", err)
			}
		})
	}
}

// TestDuplicateWhileJoiningFailsTheWorld: a second launcher claiming the host of a node that is still waiting for
// the world is refused, and the waiting node fails at once too (not after the 30s timeout), naming both claimants.
func TestDuplicateWhileJoiningFailsTheWorld(t *testing.T) {
	for _, claim := range []string{"host", "node rank"} {
		t.Run(claim, func(t *testing.T) {
			ctx := context.Background()
			ep := rdzvtest.FreeAddr(t)
			mk := func(isHost string) *rendezvous.Rendezvous {
				r, err := rendezvous.New(ctx, rendezvous.Config{Backend: Name, Endpoint: ep, NNodes: 2, NodeRank: -1, Timeout: rdzvtest.Never(),
					RunID: "run-1", Conf: map[string]string{"is_host": isHost}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.Close() })
				return r
			}
			r0, r1 := mk("true"), mk("false")
			m0 := rendezvous.Member{Instance: rendezvous.NewInstance(), Host: "same", Addr: "127.0.0.1", LocalWorkers: 4, Accelerator: "v4-32", Rank: -1}
			m1 := m0
			m1.Instance = rendezvous.NewInstance()
			if claim == "node rank" {
				m0.Rank, m1.Rank, m1.Host = 0, 0, "other"
			}
			first := make(chan error, 1)
			go func() {
				s, err := r0.Join(ctx, m0)
				if s != nil {
					s.Close()
				}
				first <- err
			}()
			rdzvtest.WaitJoiners(t, HostedServer(r0), 1)
			_, err := r1.Join(ctx, m1)
			rdzvtest.RdzvErr(t, err, rendezvous.ErrDuplicateNode)
			// at once: the join timeout is past the deadline
			err0 := testutil.Done(t, "the first claimant's join to fail after the duplicate was refused", first)
			e := rdzvtest.RdzvErr(t, err0, rendezvous.ErrDuplicateNode)
			if len(e.Nodes) != 2 || e.Nodes[0].Instance != m1.Instance || e.Nodes[1].Instance != m0.Instance {
				t.Fatalf("the first claimant's error does not name both claimants: %v", err0)
			}
			if claim == "node rank" && (e.Nodes[0].Rank != 0 || e.Nodes[1].Rank != 0) {
				t.Fatalf("the error does not name the claimed rank: %v", err0)
			}
			if strings.Contains(err0.Error(), "never arrived") {
				t.Fatalf("the first claimant waited for a node that never arrived: %v", err0)
			}
			// A fresh attempt of the same world (the duplicate gone) completes.
			m0.Instance, m1.Instance, m1.Host, m1.Rank = rendezvous.NewInstance(), rendezvous.NewInstance(), "other", -1
			if m0.Rank == 0 {
				m1.Rank = 1
			}
			rdzvtest.WaitJoiners(t, HostedServer(r0), 0)
			done := make(chan error, 2)
			for _, p := range []struct {
				r *rendezvous.Rendezvous
				m rendezvous.Member
			}{{r0, m0}, {r1, m1}} {
				go func() {
					s, err := p.r.Join(ctx, p.m)
					if s != nil {
						defer s.Close()
					}
					done <- err
				}()
			}
			for range 2 {
				if err := <-done; err != nil {
					t.Fatalf("a clean join after the duplicate: %v", err)
				}
			}
		})
	}
}
