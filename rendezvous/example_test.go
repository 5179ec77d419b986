package rendezvous_test

import (
	"context"
	"errors"
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

// A node's failure reaches every other node at once: node 1 reports that its worker of rank 5 exited 1, and node
// 0, which watches Failures, hears it. The world then agrees on the job's end: each node calls Finish with the
// verdict (the first records it), then Leave, so that its departure is not taken for a loss.
func Example_failures() {
	ctx := context.Background()
	rs := make([]*rendezvous.Rendezvous, 2)
	for i, isHost := range []string{"true", "false"} {
		ep := "127.0.0.1:0"
		if i > 0 {
			ep = rs[0].Endpoint()
		}
		r, err := rendezvous.New(ctx, rendezvous.Config{Backend: tcp.Name, Endpoint: ep, RunID: "failures", NNodes: 2,
			NodeRank: i, Timeout: 20 * time.Second, Conf: map[string]string{"is_host": isHost}})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer r.Close()
		rs[i] = r
	}
	sessions := make([]rendezvous.Session, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sessions[i], errs[i] = r.Join(ctx, rendezvous.Member{Instance: rendezvous.NewInstance(),
				Host: fmt.Sprintf("node-%d", i), Addr: "127.0.0.1", LocalWorkers: 4, Accelerator: "cpu", Rank: -1})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range sessions {
		defer s.Close()
	}
	if err := sessions[1].Fail(ctx, rendezvous.Failure{WorkerRank: 5, Reason: "exit 1"}); err != nil {
		fmt.Println(err)
		return
	}
	f := <-sessions[0].Failures()
	fmt.Printf("node 0 heard: node rank %d, worker rank %d failed: %s\n", f.Node.Rank, f.WorkerRank, f.Reason)
	for _, s := range sessions {
		if err := s.Finish(ctx, 1); err != nil {
			fmt.Println(err)
		}
		_ = s.Leave(ctx)
	}
	// Output:
	// node 0 heard: node rank 1, worker rank 5 failed: exit 1
}

// The world of one (Backend ""): this node alone, agreed at once on the member as given, with nothing to import.
// A launcher uses it for a single-host job, so that the same code runs on one host and on many.
func Example_worldOfOne() {
	ctx := context.Background()
	r, err := rendezvous.New(ctx, rendezvous.Config{NNodes: 1, NodeRank: -1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	s, err := r.Join(ctx, rendezvous.Member{Instance: rendezvous.NewInstance(), Host: "localhost", LocalWorkers: 8, Rank: -1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	a := s.Assignment()
	_ = s.Publish(ctx, "results", []byte("ok"))
	got, _ := s.Gather(ctx, "results")
	fmt.Printf("node %d of %d, world size %d, gathered %q\n", a.NodeRank, a.NNodes, a.WorldSize, got[0])
	// Output:
	// node 0 of 1, world size 8, gathered "ok"
}

// ParseConf reads torchrun's --rdzv-conf: its aliases become tpurun's keys (timeout is join_timeout), is_host
// takes torchrun's booleans, and CheckConf refuses a key neither knows.
func ExampleParseConf() {
	conf, err := rendezvous.ParseConf("timeout=60, is_host=yes")
	if err == nil {
		err = rendezvous.CheckConf(conf)
	}
	fmt.Println(conf["join_timeout"], conf["is_host"], err)
	_, err = rendezvous.ParseConf("join_timeout")
	fmt.Println(errors.Is(err, rendezvous.ErrConfig))
	// Output:
	// 60 true <nil>
	// true
}

// A configuration error matches ErrConfig and names the setting at fault and its value: here a backend that no
// package registers.
func ExampleError() {
	_, err := rendezvous.New(context.Background(), rendezvous.Config{Backend: "zookeeper", NNodes: 2, NodeRank: -1})
	var e *rendezvous.Error
	if errors.Is(err, rendezvous.ErrConfig) && errors.As(err, &e) {
		fmt.Printf("%s %q\n", e.Field, e.Value)
	}
	// Output:
	// rendezvous backend "zookeeper"
}
