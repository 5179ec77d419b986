package rendezvous_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/testutil/etcdtest"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
	"tpurun/rendezvous/etcd"
	"tpurun/rendezvous/static"
	"tpurun/rendezvous/tcp"
)

// The pod-scale benchmarks simulate every node of a world in this one process, through the public API (New, Join,
// Barrier per node), as issue 36 measures them: tcp and static 1024 nodes <= 1 s and 4096 <= 5 s to form the world
// (join and one barrier) on a 2-core machine, and a world of 4096 held 60 s with a 2 s heartbeat losing no node.
// cmd/tpurun-bench runs them for make bench (measureRendezvous).

// benchNode is how one simulated node is set up: its configuration and what it brings to the join.
type benchNode func(i int) (rendezvous.Config, rendezvous.Member)

// benchWorld joins n simulated nodes (goroutines) and has them all pass one barrier; it returns when every node
// has its assignment and the barrier is done, and closes everything.
func benchWorld(b *testing.B, n int, node benchNode, st *benchStats) {
	rs, sess := formWorld(b, n, node, st)
	b.StopTimer()
	closeWorld(rs, sess)
	b.StartTimer()
}

// benchStats counts what the server refused (by reason) and the host's listen queue dropped over a benchmark's
// iterations: a burst of real nodes should cost neither.
type benchStats struct {
	refused map[string]int64
	drops   float64
}

func newBenchStats() *benchStats { return &benchStats{refused: map[string]int64{}} }

// report reports the counts per iteration.
func (st *benchStats) report(b *testing.B) {
	total := int64(0)
	for why, k := range st.refused {
		total += k
		b.ReportMetric(float64(k)/float64(b.N), why+"/op")
	}
	b.ReportMetric(float64(total)/float64(b.N), "refused/op")
	if st.drops >= 0 {
		b.ReportMetric(st.drops/float64(b.N), "syndrops/op")
	}
}

// formWorld creates n nodes (node 0 first: it hosts the server), joins them concurrently and passes one barrier.
func formWorld(b *testing.B, n int, node benchNode, st *benchStats) ([]*rendezvous.Rendezvous, []rendezvous.Session) {
	return formWorldAs(b, n, node, nil, st)
}

// formWorldAs is formWorld with each node's member completed by self (nil: as node gives it) on its Rendezvous.
func formWorldAs(b *testing.B, n int, node benchNode, self func(r *rendezvous.Rendezvous, i int, m rendezvous.Member) (rendezvous.Member, error),
	st *benchStats) ([]*rendezvous.Rendezvous, []rendezvous.Session) {
	return formNodes(b, 0, n, node, self, st, 2*n+256) // a client and a server end per node
}

// formNodes is formWorldAs for nodes from..n-1 (node from's server, if it hosts one, in this process), with files
// open files allowed.
func formNodes(b testing.TB, from, n int, node benchNode, self func(r *rendezvous.Rendezvous, i int, m rendezvous.Member) (rendezvous.Member, error),
	st *benchStats, files int) ([]*rendezvous.Rendezvous, []rendezvous.Session) {
	needFiles(b, files)
	before := listenDrops()
	ctx := context.Background()
	n -= from
	rs := make([]*rendezvous.Rendezvous, n)
	for i := range n {
		cfg, _ := node(from + i)
		cfg.Logger = benchLogger(b)
		r, err := rendezvous.New(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		rs[i] = r
	}
	sess := make([]rendezvous.Session, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, m := node(from + i)
			if self != nil {
				if m, errs[i] = self(rs[i], from+i, m); errs[i] != nil {
					return
				}
			}
			if sess[i], errs[i] = rs[i].Join(ctx, m); errs[i] == nil {
				errs[i] = sess[i].Barrier(ctx, "ready")
			}
		})
	}
	wg.Wait()
	failed := map[string]bool{} // each kind of failure once: the first node's, and any other node's of another kind
	var msgs []string
	for i, err := range errs {
		if err != nil && !failed[errorKind(err)] {
			failed[errorKind(err)] = true
			msgs = append(msgs, fmt.Sprintf("node %d: %v", from+i, err))
		}
	}
	if len(msgs) > 0 {
		b.Fatal(strings.Join(msgs, "\n"))
	}
	if after := listenDrops(); before >= 0 && after >= 0 {
		st.drops += after - before
	} else {
		st.drops = -1
	}
	if srv := tcp.HostedServer(rs[0]); srv != nil {
		for why, k := range srv.Stats().Refused {
			st.refused[why] += k
		}
	}
	return rs, sess
}

// errorKind tells failures apart for a report: the error's words up to its first colon past "rendezvous: ".
func errorKind(err error) string {
	k, _, _ := strings.Cut(strings.TrimPrefix(err.Error(), "rendezvous: "), ":")
	return k
}

func closeWorld(rs []*rendezvous.Rendezvous, sess []rendezvous.Session) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, s := range sess {
		wg.Go(func() {
			s.Leave(ctx)
			s.Close()
		})
	}
	wg.Wait()
	for i := len(rs) - 1; i >= 0; i-- {
		rs[i].Close()
	}
}

// needFiles makes sure this process may open n files, raising its soft limit to the hard one if needed (Go raises
// it at start, but a parent may have lowered it since).
func needFiles(b testing.TB, n int) {
	b.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur >= uint64(n) {
		return
	}
	if lim.Max < uint64(n) { // raising the hard limit needs CAP_SYS_RESOURCE: root may, anyone else is told below
		raised := syscall.Rlimit{Cur: uint64(n), Max: uint64(n)}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			return
		}
	}
	lim.Cur = min(lim.Max, uint64(n))
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < uint64(n) {
		b.Fatalf("this benchmark opens %d files; RLIMIT_NOFILE allows %d (hard %d): raise it (ulimit -n)", n, lim.Cur, lim.Max)
	}
}

// listenDrops is the host's count of connections dropped at a full listen queue (TcpExt ListenDrops): each one
// costs the dialling node a SYN retransmit (1 s and more). -1 when the kernel does not say.
func listenDrops() float64 {
	f, err := os.Open("/proc/net/netstat")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		names := strings.Fields(sc.Text())
		if !sc.Scan() || len(names) == 0 || names[0] != "TcpExt:" {
			continue
		}
		vals := strings.Fields(sc.Text())
		for i, k := range names {
			if k == "ListenDrops" && i < len(vals) {
				v, _ := strconv.ParseFloat(vals[i], 64)
				return v
			}
		}
	}
	return -1
}

// tcpNode is a node of a tcp (torchrun c10d) world of CPU or GPU hosts: any rank, its own name, uneven workers
// accepted; node 0 hosts the server.
func tcpNode(ep string, n int, hb time.Duration) benchNode {
	return func(i int) (rendezvous.Config, rendezvous.Member) {
		host := "false"
		if i == 0 {
			host = "true"
		}
		return rendezvous.Config{Backend: tcp.Name, Endpoint: ep, NNodes: n, NodeRank: -1, RunID: "bench", Timeout: time.Minute, Heartbeat: hb,
				Conf: map[string]string{"is_host": host, "linger": "0.001"}},
			rendezvous.Member{Host: rdzvtest.HostName(i), Addr: "127.0.0.1", LocalWorkers: 8, UnevenWorkers: true, Accelerator: "gpu", Rank: -1,
				Ports: map[string]int{rendezvous.PortMaster: 29500, rendezvous.PortCoordinator: 8482}}
	}
}

// tpuTCPNode is a TPU host of one slice in a tcp world: every node's share names the slice's hosts.
func tpuTCPNode(ep string, n int) benchNode {
	return func(i int) (rendezvous.Config, rendezvous.Member) {
		cfg, _ := tcpNode(ep, n, 0)(i)
		return cfg, rendezvous.Member{Host: rdzvtest.HostName(i), Addr: "127.0.0.1", LocalWorkers: 4, Accelerator: fmt.Sprintf("v4-%d", 8*n), Rank: -1,
			Ports: map[string]int{rendezvous.PortMaster: 29500, rendezvous.PortCoordinator: 8482, rendezvous.PortMegascale: 8081}}
	}
}

// podHosts is a JobSet's pod names for n hosts of one slice, as TPU_WORKER_HOSTNAMES gives them.
func podHosts(n int) []string {
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("bench-slice-0-%d.bench", i)
	}
	return hosts
}

// staticNode is a TPU host of a pod: the static backend, its rank and name from the host list (TPU_WORKER_ID,
// TPU_WORKER_HOSTNAMES), node 0 hosting the server (on loopback here: the pod names do not resolve).
func staticNode(ep string, hosts []string, hb time.Duration) benchNode {
	return func(i int) (rendezvous.Config, rendezvous.Member) {
		return rendezvous.Config{Backend: static.Name, Endpoint: ep, Hosts: hosts, NodeRank: i, RunID: "bench", Timeout: time.Minute, Heartbeat: hb,
				Conf: map[string]string{"linger": "0.001"}},
			rendezvous.Member{LocalWorkers: 4, Accelerator: fmt.Sprintf("v4-%d", 8*len(hosts)), Rank: -1,
				Ports: map[string]int{rendezvous.PortMaster: 29500, rendezvous.PortCoordinator: 8482, rendezvous.PortMegascale: 8081}}
	}
}

func benchTCP(b *testing.B, n int) {
	st := newBenchStats()
	for range b.N {
		benchWorld(b, n, tcpNode(rdzvtest.FreeAddr(b), n, 0), st)
	}
	st.report(b)
}

func benchStatic(b *testing.B, n int) {
	hosts := podHosts(n)
	st := newBenchStats()
	for range b.N {
		benchWorld(b, n, staticNode(rdzvtest.FreeAddr(b), hosts, 0), st)
	}
	st.report(b)
}

func BenchmarkRendezvous256TCP(b *testing.B)  { benchTCP(b, 256) }
func BenchmarkRendezvous1024TCP(b *testing.B) { benchTCP(b, 1024) }
func BenchmarkRendezvous4096TCP(b *testing.B) { benchTCP(b, 4096) }

// BenchmarkRendezvous1024TPUTCP: TPU hosts of one slice over tcp, where each node's share names every host of its
// slice (TPU_PROCESS_ADDRESSES): its size grows with the slice, unlike the other rows'.
func BenchmarkRendezvous1024TPUTCP(b *testing.B) {
	st := newBenchStats()
	for range b.N {
		benchWorld(b, 1024, tpuTCPNode(rdzvtest.FreeAddr(b), 1024), st)
	}
	st.report(b)
}

func BenchmarkRendezvous1024Static(b *testing.B) { benchStatic(b, 1024) }
func BenchmarkRendezvous4096Static(b *testing.B) { benchStatic(b, 4096) }

// BenchmarkRendezvousHeld4096Static forms a static world of 4096 TPU hosts with a 2 s heartbeat and holds it for
// 60 s (RDZV_BENCH_HOLD moves it), every node watching its Failures: any failure (a node, or the server, declared
// lost) fails the benchmark. Its time is the formation and the hold.
func BenchmarkRendezvousHeld4096Static(b *testing.B) {
	hold := time.Minute
	if v := os.Getenv("RDZV_BENCH_HOLD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("RDZV_BENCH_HOLD=%s: %v", v, err)
		}
		hold = d
	}
	const n = 4096
	hosts := podHosts(n)
	st := newBenchStats()
	lost := 0
	for range b.N {
		rs, sess := formWorld(b, n, staticNode(rdzvtest.FreeAddr(b), hosts, 2*time.Second), st)
		formed := time.Now()
		var mu sync.Mutex
		var first string
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, s := range sess {
			wg.Go(func() {
				select {
				case f, ok := <-s.Failures():
					if ok {
						mu.Lock()
						if lost++; lost == 1 {
							first = fmt.Sprintf("%s after the world formed: %v", time.Since(formed).Round(time.Millisecond), f)
						}
						mu.Unlock()
					}
				case <-stop:
				}
			})
		}
		time.Sleep(hold) // the case measured: a world held for this long
		close(stop)
		wg.Wait()
		if lost > 0 {
			b.Fatalf("%d failures in a world of %d held %s, the first %s", lost, n, hold, first)
		}
		b.StopTimer()
		closeWorld(rs, sess)
		b.StartTimer()
	}
	b.ReportMetric(float64(lost)/float64(b.N), "failures/op")
	st.report(b)
}

// etcdNode is a node of a world of n TPU-like hosts on the etcd at ep, under a key prefix of its own per world
// (it): any rank, its own name.
func etcdNode(ep string, n, it int, heartbeat time.Duration) benchNode {
	prefix := fmt.Sprintf("/bench/%d/", it)
	return func(i int) (rendezvous.Config, rendezvous.Member) {
		return rendezvous.Config{Backend: etcd.Name, Endpoint: ep, NNodes: n, NodeRank: -1, RunID: "bench", Timeout: 2 * time.Minute,
				Heartbeat: heartbeat, Conf: map[string]string{"prefix": prefix}},
			rendezvous.Member{Host: rdzvtest.HostName(i), Addr: "127.0.0.1", LocalWorkers: 4, Accelerator: "v4-1024", Rank: -1,
				Ports: map[string]int{rendezvous.PortMaster: 29500, rendezvous.PortCoordinator: 8482, rendezvous.PortMegascale: 8081}}
	}
}

// settle starts a timed iteration on a clean heap: what the world before it left (a thousand closed clients) is
// collected first, not during the next one. Untimed.
func settle(b *testing.B) {
	b.StopTimer()
	runtime.GC()
	b.StartTimer()
}

// benchEtcd times the forming of a world of n nodes on a real etcd (one member, in this process, as every node
// is): the pod-scale rows (tpurun-bench -only rendezvous).
func benchEtcd(b *testing.B, n int) {
	ep := etcdtest.Start(b, 1).Endpoint()
	b.ResetTimer() // etcd's start is not the rendezvous
	st := newBenchStats()
	for it := 0; it < b.N; it++ {
		settle(b)
		benchWorld(b, n, etcdNode(ep, n, it, rendezvous.DefaultHeartbeat), st)
	}
}

func BenchmarkRendezvous256Etcd(b *testing.B)  { benchEtcd(b, 256) }
func BenchmarkRendezvous1024Etcd(b *testing.B) { benchEtcd(b, 1024) }

// BenchmarkRendezvousHeld1024Etcd forms a world of 1024 nodes on a real etcd with a heartbeat of 2 s and holds it
// for a minute (RDZV_BENCH_HOLD, a duration, for another time): it fails when any node hears of a failure (a node
// lost) or loses etcd. It reports the nodes that heard of one (failures/op), and its time is the formation and the
// hold, as the held static world's.
func BenchmarkRendezvousHeld1024Etcd(b *testing.B) {
	const n, heartbeat = 1024, 2 * time.Second
	hold := time.Minute
	if d, err := time.ParseDuration(os.Getenv("RDZV_BENCH_HOLD")); err == nil {
		hold = d
	}
	ep := etcdtest.Start(b, 1).Endpoint()
	b.ResetTimer() // etcd's start is not the rendezvous
	st := newBenchStats()
	for it := 0; it < b.N; it++ {
		settle(b)
		rs, sess := formWorld(b, n, etcdNode(ep, n, it, heartbeat), st)
		heard := make(chan string, n)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i, s := range sess {
			wg.Go(func() {
				select {
				case f := <-s.Failures():
					heard <- fmt.Sprintf("node %d heard: %v", i, f)
				case <-s.Done():
					heard <- fmt.Sprintf("node %d: %v", i, s.Err())
				case <-stop:
				}
			})
		}
		held := time.NewTimer(hold)
		var lost []string
		select {
		case <-held.C:
		case l := <-heard:
			lost = append(lost, l)
		}
		close(stop)
		wg.Wait()
		for len(heard) > 0 {
			lost = append(lost, <-heard)
		}
		b.StopTimer() // the time is the formation and the hold, as the held static world's
		closeWorld(rs, sess)
		b.ReportMetric(float64(len(lost)), "failures/op")
		if len(lost) > 0 {
			b.Fatalf("a world of %d nodes held with a heartbeat of %s: %d nodes heard of a failure within %s, the first: %s",
				n, heartbeat, len(lost), hold, lost[0])
		}
		b.StartTimer()
	}
}
