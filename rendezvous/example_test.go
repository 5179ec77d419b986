package rendezvous_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"tpurun/rendezvous"
	"tpurun/rendezvous/tcp"
)

// Two launchers agree on a world over tcp on loopback: node 0 hosts the embedded server on the endpoint, node 1
// connects to it. Each joins with what it brings (host, address, local workers); both get the same assignment,
// pass a barrier and gather what every node published.
func Example() {
	ctx := context.Background()
	host, err := rendezvous.New(ctx, rendezvous.Config{Backend: tcp.Name, Endpoint: "127.0.0.1:0", RunID: "example",
		NNodes: 2, NodeRank: -1, Timeout: 20 * time.Second, Conf: map[string]string{"is_host": "true"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer host.Close()
	peer, err := rendezvous.New(ctx, rendezvous.Config{Backend: tcp.Name, Endpoint: host.Endpoint(), RunID: "example",
		NNodes: 2, NodeRank: -1, Timeout: 20 * time.Second, Conf: map[string]string{"is_host": "false"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer peer.Close()

	lines := make([]string, 2)
	var wg sync.WaitGroup
	for i, r := range []*rendezvous.Rendezvous{host, peer} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := r.Join(ctx, rendezvous.Member{Instance: rendezvous.NewInstance(), Host: fmt.Sprintf("node-%c", 'a'+i),
				Addr: "127.0.0.1", LocalWorkers: 4, Accelerator: "cpu", RunID: "example", Rank: i})
			if err != nil {
				lines[i] = err.Error()
				return
			}
			defer s.Close()
			a := s.Assignment()
			_ = s.Publish(ctx, "hello", []byte(fmt.Sprintf("from node %d", a.NodeRank)))
			if err := s.Barrier(ctx, "ready"); err != nil {
				lines[i] = err.Error()
				return
			}
			got, _ := s.Gather(ctx, "hello")
			lines[i] = fmt.Sprintf("node %d of %d, first rank %d, world size %d, gathered %q %q",
				a.NodeRank, a.NNodes, a.Self().FirstRank, a.WorldSize, got[0], got[1])
			_ = s.Leave(ctx)
		}()
	}
	wg.Wait()
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// node 0 of 2, first rank 0, world size 8, gathered "from node 0" "from node 1"
	// node 1 of 2, first rank 4, world size 8, gathered "from node 0" "from node 1"
}
