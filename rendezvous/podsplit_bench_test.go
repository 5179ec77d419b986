package rendezvous_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
)

// The moonshot row (256 slices of 64 hosts, 16,384 nodes) needs two open files per node in one process (a client
// and a server end), 33,000, and this vm's hard RLIMIT_NOFILE is 20,000. So node 0, the host of the server (on a
// pod: slice 0's first host), runs as a process of its own, as it would on its own host: the test binary
// re-executed (sliceHostVerb), a full node (its Rendezvous hosts the server; its Member filled in as tpurun fills
// it; it joins and passes the barrier). The other 16,383 nodes are goroutines of the benchmark, each a full
// rendezvous client with its Member as tpurun fills it: one open file per node in each process.

// sliceHostVerb: slicehost, RDZV_SLICE_EP, RDZV_SLICES, RDZV_HOSTS: node 0 of sliceNode's multislice job. Prints
// "up" once its server listens, "ready" once it passed the barrier; then holds its session until stdin closes, and leaves.
func sliceHostVerb(*testutil.Worker) int {
	slices, _ := strconv.Atoi(os.Getenv("RDZV_SLICES"))
	hosts, _ := strconv.Atoi(os.Getenv("RDZV_HOSTS"))
	cfg, m := sliceNode(os.Getenv("RDZV_SLICE_EP"), slices, hosts)(0)
	cfg.Logger = benchLog()
	if p := os.Getenv("RDZV_SLICEHOST_CPUPROFILE"); p != "" { // where node 0's process writes its CPU profile
		if f, err := os.Create(p); err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	ctx := context.Background()
	r, err := rendezvous.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "slicehost:", err)
		return 3
	}
	defer r.Close()
	fmt.Println("up")
	if m, err = asTpurun(r, 0, m); err != nil {
		fmt.Fprintln(os.Stderr, "slicehost:", err)
		return 3
	}
	s, err := r.Join(ctx, m)
	if err == nil {
		defer s.Close()
		err = s.Barrier(ctx, "ready")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "slicehost:", err)
		return 4
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the benchmark is done
	_ = s.Leave(ctx)
	return 0
}

// sliceHost is node 0 of a multislice job as a process of its own (sliceHostVerb).
type sliceHost struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// startSliceHost starts node 0 of slices x hosts with its server at ep, and waits until the server listens.
func startSliceHost(t testing.TB, ep string, slices, hosts int) *sliceHost {
	t.Helper()
	cmd := testutil.Command("slicehost")
	cmd.Env = append(cmd.Env, "RDZV_SLICE_EP="+ep, fmt.Sprintf("RDZV_SLICES=%d", slices), fmt.Sprintf("RDZV_HOSTS=%d", hosts))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &sliceHost{cmd: cmd, stdin: stdin, lines: make(chan string, 4)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(h.stop)
	h.await(t, "up")
	return h
}

// await waits for the node's next line, which must be want (its exit, or another line, fails t).
func (h *sliceHost) await(t testing.TB, want string) {
	t.Helper()
	l, ok := <-h.lines
	if !ok || !strings.HasPrefix(l, want) {
		err := h.cmd.Wait()
		t.Fatalf("node 0's process said %q (open %v), want %q; it exited: %v", l, ok, want, err)
	}
}

// stop closes the node's stdin (it leaves and exits) and reaps it; a node that does not exit within a minute is
// killed.
func (h *sliceHost) stop() {
	_ = h.stdin.Close()
	t := time.AfterFunc(time.Minute, func() { _ = h.cmd.Process.Kill() })
	defer t.Stop()
	_ = h.cmd.Wait()
}

// formSplit forms the multislice job of slices x hosts with node 0 a process of its own (started here) and the
// others goroutines of this process: it returns once every node, node 0 included, passed the barrier.
func formSplit(t testing.TB, slices, hosts int, st *benchStats) (*sliceHost, []*rendezvous.Rendezvous, []rendezvous.Session) {
	ep := rdzvtest.FreeAddr(t)
	h := startSliceHost(t, ep, slices, hosts)
	n := slices * hosts
	rs, sess := formNodes(t, 1, n, sliceNode(ep, slices, hosts), asTpurun, st, n+256) // a client end per node
	h.await(t, "ready")
	return h, rs, sess
}

// BenchmarkRendezvousPodSlices256x64: the moonshot, 256 slices of 64 hosts, 16,384 hosts, node 0 (the server's
// host) a process of its own. For a diagnosis: RDZV_MOON_SLICES sets another number of slices of 64 hosts, and
// RDZV_SLICEHOST_CPUPROFILE is where node 0's process writes its CPU profile.
func BenchmarkRendezvousPodSlices256x64(b *testing.B) {
	st := newBenchStats()
	for range b.N {
		settle(b)
		slices := 256
		if v := os.Getenv("RDZV_MOON_SLICES"); v != "" {
			slices, _ = strconv.Atoi(v)
		}
		h, rs, sess := formSplit(b, slices, 64, st)
		b.StopTimer()
		closeWorld(rs, sess)
		h.stop()
		b.StartTimer()
	}
	st.report(b)
}

// TestPodSplitProcess: the moonshot row's harness forms a world whose node 0, the host of the server, is a process
// of its own (2 slices of 2 hosts): every node has its share, node 0's process passed the barrier with them.
func TestPodSplitProcess(t *testing.T) {
	h, rs, sess := formSplit(t, 2, 2, newBenchStats())
	defer closeWorld(rs, sess)
	for i, s := range sess {
		if a := s.Assignment(); a.NNodes != 4 || a.NodeRank != i+1 || len(a.Nodes) != 2 {
			t.Fatalf("node %d: %+v, want node rank %d of 4 with its slice's 2 nodes", i+1, a, i+1)
		}
	}
	h.stop()
	if !h.cmd.ProcessState.Success() {
		t.Fatalf("node 0's process: %v", h.cmd.ProcessState)
	}
}
