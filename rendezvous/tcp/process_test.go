package tcp

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
)

// TestServerProcessStalled: a server whose process stops for longer than a heartbeat (SIGSTOP, as a long garbage
// collection or a loaded host stalls it) and then runs again is not declared lost by its nodes, nor does it declare
// them lost: they pass a barrier after it resumes. A server that stays stopped (a host gone: no connection drops)
// is declared lost by every node, within two heartbeats of silence.
func TestServerProcessStalled(t *testing.T) {
	hb := testutil.Scaled(2 * time.Second)
	srv := startServerProcess(t, "s3cret-token", "RDZV_TEST_HB="+hb.String())
	ctx := context.Background()
	sess := make([]rendezvous.Session, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range sess {
		r, err := rendezvous.New(ctx, rendezvous.Config{Backend: Name, Endpoint: srv.addr, NNodes: 2, NodeRank: i, Token: "s3cret-token",
			Timeout: rdzvtest.Never(), Heartbeat: hb, Conf: map[string]string{"is_host": "false"}})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		wg.Go(func() {
			if sess[i], errs[i] = r.Join(ctx, rendezvous.Member{Host: rdzvtest.HostName(i), Addr: "127.0.0.1", LocalWorkers: 1, Accelerator: "cpu", Rank: i}); errs[i] == nil {
				errs[i] = sess[i].Barrier(ctx, "before")
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		defer sess[i].Close()
	}
	if err := syscall.Kill(srv.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// the case under test: a stall of a heartbeat and a quarter, longer than the heartbeat that loses a node and
	// shorter than the two that lose the server (whose last pong may have come a third of a heartbeat before)
	time.Sleep(hb * 5 / 4)
	if err := syscall.Kill(srv.pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for i := range sess {
		wg.Go(func() { errs[i] = sess[i].Barrier(ctx, "after") })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d, barrier after the server's stall: %v", i, err)
		}
	}
	if err := syscall.Kill(srv.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	for i := range sess {
		if f := rdzvtest.WaitFailure(t, sess[i]); !f.Lost || !f.Store {
			t.Fatalf("node %d heard %+v, want the server lost", i, f)
		}
		rdzvtest.RdzvErr(t, sess[i].Err(), rendezvous.ErrStoreLost)
	}
	if el := time.Since(stopped); el < hb {
		t.Fatalf("a stopped server was declared lost after %s, within the heartbeat %s", el, hb)
	}
	syscall.Kill(srv.pid, syscall.SIGCONT) // so that its cleanup can end it
}
