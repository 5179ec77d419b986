package status

import (
	"context"
	"net"
	"os"
	"testing"

	"go.uber.org/zap"

	"tpurun/internal/testutil"
)

// TestStatusServerCapsConnections: 100 idle token-less clients (never sending a request) hold at most
// maxConns of the server's file descriptors (the rest wait in the kernel's backlog).
func TestStatusServerCapsConnections(t *testing.T) {
	mon := NewMonitor(0)
	addr, stop, err := mon.Serve(context.Background(), "127.0.0.1:0", false, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	fds := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	before := fds()
	var conns []net.Conn
	for range 100 {
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	// The server accepts what it will: then its accept loop waits in netutil's limitListener.Accept for a free slot
	// (the event), with its maxConns connections open and the rest in the kernel's backlog. A server without
	// the cap never waits there: it accepts all 100 and waits in the kernel's accept. (The idle connections are
	// closed after statusTimeout, which frees slots: the assertion below comes long before, right after the event.)
	testutil.Eventually(t, "the status server's accept loop to wait for a free connection slot", func() bool {
		return testutil.GoroutineWaits("select", "(*limitListener).Accept") && fds()-before >= 100+maxConns
	})
	if grew := fds() - before; grew > 100+maxConns+4 {
		t.Fatalf("100 idle clients made the process hold %d more descriptors, want at most %d (the clients' 100 and the server's cap %d)",
			grew, 100+maxConns+4, maxConns)
	}
}
