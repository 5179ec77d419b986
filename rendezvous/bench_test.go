package rendezvous

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"tpurun/rendezvous/etcdtest"
)

// joinWorld starts n simulated nodes (goroutines) in this process and has each join and pass one barrier; it
// returns when every node has its assignment and the barrier is done, with the function that closes them all
// (node 0, which may host the server, last).
func joinWorld(b *testing.B, n int, cfg func(i int) Config) ([]Session, func()) {
	ctx := context.Background()
	rs := make([]*Rendezvous, n)
	sess := make([]Session, n)
	closeAll := func() {
		for _, s := range sess {
			if s != nil {
				s.Leave(ctx)
				s.Close()
			}
		}
		for i := n - 1; i >= 0; i-- {
			if rs[i] != nil {
				rs[i].Close()
			}
		}
	}
	for i := range n {
		r, err := New(ctx, cfg(i))
		if err != nil {
			closeAll()
			b.Fatal(err)
		}
		rs[i] = r
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			m := Member{Host: hostName(i), Addr: "127.0.0.1", LocalWorkers: 4, Accelerator: "v4-1024", Rank: -1,
				Ports: map[string]int{PortMaster: 29500, PortCoordinator: 8482, PortMegascale: 8081}}
			if sess[i], errs[i] = rs[i].Join(ctx, m); errs[i] == nil {
				errs[i] = sess[i].Barrier(ctx, "ready")
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			closeAll()
			b.Fatalf("node %d: %v", i, err)
		}
	}
	return sess, closeAll
}

// benchWorld times the forming of a world of n nodes (New, Join and a barrier on every node) once per iteration;
// closing it is not timed.
func benchWorld(b *testing.B, n int, cfg func(i int) Config) {
	for it := 0; it < b.N; it++ {
		_, closeAll := joinWorld(b, n, cfg)
		b.StopTimer()
		closeAll()
		b.StartTimer()
	}
}

func BenchmarkRendezvous256TCP(b *testing.B) {
	for i := 0; i < b.N; i++ {
		ep := freeAddr(b)
		benchWorld(b, 256, func(i int) Config {
			host := "false"
			if i == 0 {
				host = "true"
			}
			return Config{Backend: BackendTCP, Endpoint: ep, NNodes: 256, NodeRank: -1, RunID: "bench", Timeout: 30 * time.Second,
				Conf: map[string]string{"is_host": host, "linger": "0.001"}}
		})
	}
}

// etcdWorldConfig is the configuration of node i of a world of n nodes on the etcd at ep, under a key prefix of
// its own per world (it).
func etcdWorldConfig(ep string, n, it int, heartbeat time.Duration) func(i int) Config {
	prefix := fmt.Sprintf("/bench/%d/", it)
	return func(i int) Config {
		return Config{Backend: BackendEtcd, Endpoint: ep, NNodes: n, NodeRank: -1, RunID: "bench", Timeout: 2 * time.Minute,
			Heartbeat: heartbeat, Conf: map[string]string{"prefix": prefix}}
	}
}

// benchEtcd times the forming of a world of n nodes on a real etcd (one member, in this process, as every node
// is): the pod-scale rows (tpurun-bench -only rendezvous).
func benchEtcd(b *testing.B, n int) {
	ep := etcdtest.Start(b, 1).Endpoint()
	b.ResetTimer() // etcd's start is not the rendezvous
	for it := 0; it < b.N; it++ {
		settle(b)
		_, closeAll := joinWorld(b, n, etcdWorldConfig(ep, n, it, DefaultHeartbeat))
		b.StopTimer()
		closeAll()
		b.StartTimer()
	}
}

// settle starts a timed iteration on a clean heap: what the world before it left (a thousand closed clients) is
// collected first, not during the next one. Untimed.
func settle(b *testing.B) {
	b.StopTimer()
	runtime.GC()
	b.StartTimer()
}

func BenchmarkRendezvous256Etcd(b *testing.B)  { benchEtcd(b, 256) }
func BenchmarkRendezvous1024Etcd(b *testing.B) { benchEtcd(b, 1024) }

// BenchmarkRendezvousHeld1024Etcd forms a world of 1024 nodes on a real etcd with a heartbeat of 2 s and holds it
// for a minute (RDZV_BENCH_HOLD, a duration, for another time): it fails when any node hears of a failure (a node
// lost) or loses etcd. ns/op is the forming, as in the other rows; it reports the nodes lost (lost).
func BenchmarkRendezvousHeld1024Etcd(b *testing.B) {
	const n, heartbeat = 1024, 2 * time.Second
	hold := time.Minute
	if d, err := time.ParseDuration(os.Getenv("RDZV_BENCH_HOLD")); err == nil {
		hold = d
	}
	ep := etcdtest.Start(b, 1).Endpoint()
	b.ResetTimer() // etcd's start is not the rendezvous
	for it := 0; it < b.N; it++ {
		settle(b)
		sess, closeAll := joinWorld(b, n, etcdWorldConfig(ep, n, it, heartbeat))
		b.StopTimer()
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
		closeAll()
		b.ReportMetric(float64(len(lost)), "lost")
		if len(lost) > 0 {
			b.Fatalf("a world of %d nodes held with a heartbeat of %s: %d nodes heard of a failure within %s, the first: %s",
				n, heartbeat, len(lost), hold, lost[0])
		}
		b.StartTimer()
	}
}
