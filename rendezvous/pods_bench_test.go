package rendezvous_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"tpurun/internal/freeport"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
	"tpurun/rendezvous/etcd"
	"tpurun/rendezvous/static"
)

// The pods users run (issue 46), every node a goroutine of this process with a 2 s heartbeat, and each node's
// Member filled in as tpurun fills it (rendezvous.Self, the launcher's own code: its name, its address toward the
// endpoint, its ports): GPU hosts, a multislice job, a full v5p pod as one slice on static and on tcp, 1024 nodes
// on Debian's etcd-server run as a process of its own, and 256 slices of 64 hosts. cmd/tpurun-bench runs them.

// podHeartbeat is every row's heartbeat: short, so that a node that looks silent while the world forms would be
// declared lost within the formation.
const podHeartbeat = 2 * time.Second

// asTpurun completes node i's member as tpurun does (rendezvous.Self), the node's host name being hostName(i),
// as the launcher's is os.Hostname().
func asTpurun(r *rendezvous.Rendezvous, i int, m rendezvous.Member) (rendezvous.Member, error) {
	m.Instance = rendezvous.NewInstance()
	return r.Self(m, func() (string, error) { return rdzvtest.HostName(i), nil }, os.Getpid())
}

// podPorts are the ports a TPU host brings (the launcher's: MASTER_PORT, the coordinator's and MegaScale's).
func podPorts() map[string]int {
	return map[string]int{rendezvous.PortMaster: 29500, rendezvous.PortCoordinator: 8482, rendezvous.PortMegascale: 8081}
}

// gpuNode is a torchrun-style GPU host of a tcp world: any rank, uneven workers accepted, named by tpurun (its
// host name with its pid, its address toward the endpoint).
func gpuNode(ep string, n int) benchNode {
	return func(i int) (rendezvous.Config, rendezvous.Member) {
		cfg, _ := tcpNode(ep, n, podHeartbeat)(i)
		return cfg, rendezvous.Member{LocalWorkers: 8, UnevenWorkers: true, Accelerator: "gpu", Rank: -1, RunID: "bench",
			Ports: map[string]int{rendezvous.PortMaster: 29500, rendezvous.PortCoordinator: 29501}}
	}
}

// sliceNode is host w of slice s of a multislice job of slices x hosts TPU hosts, as tpurun lays it out by itself
// (discovery): the static backend, node rank s*hosts+w, each host named by its own TPU_WORKER_HOSTNAMES entry (name
// and address), node 0 (slice 0's first host, the coordinator) hosting the server at ep.
func sliceNode(ep string, slices, hosts int) benchNode {
	return func(i int) (rendezvous.Config, rendezvous.Member) {
		s, w := i/hosts, i%hosts
		self := fmt.Sprintf("bench-slice-%d-%d.bench", s, w)
		return rendezvous.Config{Backend: static.Name, Endpoint: ep, NNodes: slices * hosts, NodeRank: i, RunID: "bench", Timeout: 2 * time.Minute,
				Heartbeat: podHeartbeat, AllowUnauthenticated: true, Conf: map[string]string{"linger": "0.001"}},
			rendezvous.Member{Host: self, Addr: self, LocalWorkers: 4, Accelerator: "v5p-512", RunID: "bench", SliceID: s, NumSlices: slices,
				Rank: i, Ports: podPorts()}
	}
}

// loopbackHosts is a host list of n addresses of the loopback network (127.0.0.1, 127.0.0.2, ...): a TPU VM's
// TPU_WORKER_HOSTNAMES is its slice's internal addresses, and these reach this host, as the hosts' must.
func loopbackHosts(n int) []string {
	hosts := make([]string, n)
	for i := range hosts {
		k := i + 1
		hosts[i] = fmt.Sprintf("127.%d.%d.%d", k>>16&255, k>>8&255, k&255)
	}
	return hosts
}

// podNode is host i of one slice of hosts (a full v5p pod: 2240) in tpurun's TPU default: the static backend
// without an endpoint, the node rank from TPU_WORKER_ID, the host list from TPU_WORKER_HOSTNAMES, node 0 hosting the
// server on its own address at port.
func podNode(hosts []string, port int) benchNode {
	return func(i int) (rendezvous.Config, rendezvous.Member) {
		return rendezvous.Config{Backend: static.Name, Hosts: hosts, NodeRank: i, RunID: "bench", Timeout: 2 * time.Minute,
				Heartbeat: podHeartbeat, AllowUnauthenticated: true, Conf: map[string]string{"linger": "0.001", "port": strconv.Itoa(port)}},
			rendezvous.Member{LocalWorkers: 4, Accelerator: "v5p-17920", RunID: "bench", NumSlices: 1, Rank: i, Ports: podPorts()}
	}
}

// podTCPNode is a host of the same pod met on tcp: any rank, each host naming itself (its host name, its address
// toward the endpoint), and each share naming the slice's hosts (TPU_WORKER_HOSTNAMES, TPU_PROCESS_ADDRESSES).
func podTCPNode(ep string, n int) benchNode {
	return func(i int) (rendezvous.Config, rendezvous.Member) {
		cfg, _ := tcpNode(ep, n, podHeartbeat)(i)
		cfg.Timeout = 2 * time.Minute
		return cfg, rendezvous.Member{LocalWorkers: 4, Accelerator: "v5p-17920", RunID: "bench", NumSlices: 1, Rank: -1, Ports: podPorts()}
	}
}

// etcdServerNode is a CPU host of a world of n on the etcd at ep (a process of its own), under a key prefix of
// its own per world (it): any rank, named by tpurun.
func etcdServerNode(ep string, n, it int) benchNode {
	prefix := fmt.Sprintf("/bench/%d/", it)
	return func(i int) (rendezvous.Config, rendezvous.Member) {
		return rendezvous.Config{Backend: etcd.Name, Endpoint: ep, NNodes: n, NodeRank: -1, RunID: "bench", Timeout: 2 * time.Minute,
				Heartbeat: podHeartbeat, Conf: map[string]string{"prefix": prefix}},
			rendezvous.Member{LocalWorkers: 8, UnevenWorkers: true, Accelerator: "cpu", RunID: "bench", Rank: -1,
				Ports: map[string]int{rendezvous.PortMaster: 29500, rendezvous.PortCoordinator: 29501}}
	}
}

// podHold is how long a held row holds its world: a minute, or RDZV_BENCH_HOLD (a duration).
func podHold(b *testing.B) time.Duration {
	if v := os.Getenv("RDZV_BENCH_HOLD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("RDZV_BENCH_HOLD=%s: %v", v, err)
		}
		return d
	}
	return time.Minute
}

// benchPod times the formation of the world of n nodes that world lays out for iteration it (a fresh endpoint
// each), and holds it for hold when hold > 0: every node watches its Failures and its session, and any failure
// (a node lost, the store lost) fails the row. Its time is the formation, and the hold when held.
func benchPod(b *testing.B, n int, world func(it int) benchNode, hold time.Duration) {
	st := newBenchStats()
	failures := 0
	for it := range b.N {
		settle(b)
		rs, sess := formWorldAs(b, n, world(it), asTpurun, st)
		if hold > 0 {
			failures += holdWorld(b, sess, hold)
		}
		b.StopTimer()
		closeWorld(rs, sess)
		b.StartTimer()
	}
	if hold > 0 {
		b.ReportMetric(float64(failures)/float64(b.N), "failures/op")
	}
	st.report(b)
}

// holdWorld holds a formed world for hold, every node watching its Failures and its session; it fails the
// benchmark at the first failure, naming it.
func holdWorld(b *testing.B, sess []rendezvous.Session, hold time.Duration) int {
	formed := time.Now()
	heard := make(chan string, len(sess))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range sess {
		wg.Go(func() {
			select {
			case f := <-s.Failures():
				heard <- fmt.Sprintf("node %d heard %s after the world formed: %v", i, time.Since(formed).Round(time.Millisecond), f)
			case <-s.Done():
				heard <- fmt.Sprintf("node %d lost its session %s after the world formed: %v", i, time.Since(formed).Round(time.Millisecond), s.Err())
			case <-stop:
			}
		})
	}
	held := time.NewTimer(hold)
	defer held.Stop()
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
	if len(lost) > 0 {
		b.Fatalf("a world of %d nodes held %s with a heartbeat of %s: %d failures, the first: %s", len(sess), hold, podHeartbeat, len(lost), lost[0])
	}
	return len(lost)
}

// BenchmarkRendezvousPodGPU4096: 4096 torchrun-style GPU hosts on tcp.
func BenchmarkRendezvousPodGPU4096(b *testing.B) {
	const n = 4096
	benchPod(b, n, func(int) benchNode { return gpuNode(rdzvtest.FreeAddr(b), n) }, 0)
}

// slicesRow is a multislice job of slices x 64 TPU hosts, formed (and held, when hold > 0).
func slicesRow(b *testing.B, slices int, hold time.Duration) {
	const hosts = 64
	benchPod(b, slices*hosts, func(int) benchNode { return sliceNode(rdzvtest.FreeAddr(b), slices, hosts) }, hold)
}

// BenchmarkRendezvousPodSlices64x64: a multislice job of 64 slices of v5p-512 (64 hosts of 4 chips), 4096 hosts.
func BenchmarkRendezvousPodSlices64x64(b *testing.B) { slicesRow(b, 64, 0) }

// BenchmarkRendezvousPodHeldSlices64x64: the same job held a minute, no node lost.
func BenchmarkRendezvousPodHeldSlices64x64(b *testing.B) { slicesRow(b, 64, podHold(b)) }

// v5pHosts is a full v5p pod's hosts: 8960 chips, 4 per host, in one slice.
const v5pHosts = 2240

// BenchmarkRendezvousPodV5pStatic: a full v5p pod as one slice in tpurun's TPU default (static, the ranks and
// names from TPU_WORKER_ID and TPU_WORKER_HOSTNAMES).
func BenchmarkRendezvousPodV5pStatic(b *testing.B) {
	hosts := loopbackHosts(v5pHosts)
	benchPod(b, v5pHosts, func(int) benchNode {
		port, err := freeport.Pick(hosts[0])
		if err != nil {
			b.Fatal(err)
		}
		return podNode(hosts, port)
	}, 0)
}

// BenchmarkRendezvousPodV5pTCP: the same pod on tcp, each host naming itself.
func BenchmarkRendezvousPodV5pTCP(b *testing.B) {
	benchPod(b, v5pHosts, func(int) benchNode { return podTCPNode(rdzvtest.FreeAddr(b), v5pHosts) }, 0)
}

// etcdServerRow is a world of 1024 CPU hosts on Debian's etcd-server, a process of its own, formed (and held).
func etcdServerRow(b *testing.B, hold time.Duration) {
	const n = 1024
	ep := startEtcdServer(b)
	b.ResetTimer() // etcd's start is not the rendezvous
	benchPod(b, n, func(it int) benchNode { return etcdServerNode(ep, n, it) }, hold)
}

// BenchmarkRendezvousPodEtcdServer1024: 1024 CPU hosts on Debian's etcd-server.
func BenchmarkRendezvousPodEtcdServer1024(b *testing.B) { etcdServerRow(b, 0) }

// BenchmarkRendezvousPodHeldEtcdServer1024: the same world held a minute, no node lost.
func BenchmarkRendezvousPodHeldEtcdServer1024(b *testing.B) { etcdServerRow(b, podHold(b)) }

// etcdServerBinary is Debian's etcd-server (package etcd-server); ETCD_BIN names another.
func etcdServerBinary() string {
	if v := os.Getenv("ETCD_BIN"); v != "" {
		return v
	}
	return "/usr/bin/etcd"
}

// startEtcdServer starts Debian's etcd-server as a process of its own on loopback, with a data directory of the
// benchmark's, and returns its client endpoint once it answers a read; it is killed and reaped at cleanup.
func startEtcdServer(b *testing.B) string {
	b.Helper()
	bin := etcdServerBinary()
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("Debian's etcd-server is needed (apt-get install etcd-server; ETCD_BIN names another): %v", err)
	}
	var ports [2]int
	for i := range ports {
		p, err := freeport.Pick("127.0.0.1")
		if err != nil {
			b.Fatal(err)
		}
		ports[i] = p
	}
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	var out bytes.Buffer
	cmd := exec.Command(bin, "--name", "bench", "--data-dir", b.TempDir(), "--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "bench="+peer, "--log-level", "error")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Get(rctx, "/bench")
		rcancel()
		if err == nil {
			return client
		}
		if ctx.Err() != nil {
			b.Fatalf("etcd-server at %s did not answer a read within a minute: %v; its output: %s", client, err, out.String())
		}
	}
}
