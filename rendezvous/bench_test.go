package rendezvous

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"tpurun/rendezvous/etcdtest"
)

// benchWorld joins n simulated nodes (goroutines) and has them all pass one barrier; it returns when every node
// has its assignment and the barrier is done, and closes everything.
func benchWorld(b *testing.B, n int, cfg func(i int) Config) {
	ctx := context.Background()
	rs := make([]*Rendezvous, n)
	for i := range n {
		r, err := New(ctx, cfg(i))
		if err != nil {
			b.Fatal(err)
		}
		rs[i] = r
	}
	sess := make([]Session, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := Member{Host: hostName(i), Addr: "127.0.0.1", LocalWorkers: 4, Accelerator: "v4-1024", Rank: -1,
				Ports: map[string]int{PortMaster: 29500, PortCoordinator: 8482, PortMegascale: 8081}}
			if sess[i], errs[i] = rs[i].Join(ctx, m); errs[i] == nil {
				errs[i] = sess[i].Barrier(ctx, "ready")
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("node %d: %v", i, err)
		}
	}
	for _, s := range sess {
		s.Leave(ctx)
		s.Close()
	}
	for i := n - 1; i >= 0; i-- {
		rs[i].Close()
	}
	b.StartTimer()
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

func BenchmarkRendezvous256Etcd(b *testing.B) {
	ec := etcdtest.Start(b, 1)
	ep := ec.Endpoint()
	for it := 0; it < b.N; it++ {
		prefix := fmt.Sprintf("/bench/%d/", it)
		benchWorld(b, 256, func(i int) Config {
			return Config{Backend: BackendEtcd, Endpoint: ep, NNodes: 256, NodeRank: -1, RunID: "bench", Timeout: 60 * time.Second,
				Heartbeat: 5 * time.Second, Conf: map[string]string{"prefix": prefix}}
		})
	}
}
