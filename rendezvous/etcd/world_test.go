package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
)

// fillMember sets every field of m that JSON encodes to a value of its own for member i (a field added to
// Member gets one too, whatever its type), so that a codec that drops or mixes up a field is found.
func fillMember(t *testing.T, m *rendezvous.Member, i int) {
	t.Helper()
	v := reflect.ValueOf(m).Elem()
	for _, f := range memberFields() {
		fv := v.Field(f.index)
		switch fv.Kind() {
		case reflect.String:
			fv.SetString(fmt.Sprintf("%s-%d", f.name, i))
		case reflect.Int, reflect.Int64:
			fv.SetInt(int64(i*31 + f.index))
		case reflect.Bool:
			fv.SetBool(i%2 == 0)
		case reflect.Map:
			mv := reflect.MakeMap(fv.Type())
			mv.SetMapIndex(reflect.ValueOf(fmt.Sprintf("k%d", i)), reflect.ValueOf(i).Convert(fv.Type().Elem()))
			fv.Set(mv)
		default:
			t.Fatalf("Member.%s is a %s: teach fillMember to fill it", v.Type().Field(f.index).Name, fv.Kind())
		}
	}
}

// TestWorldColumns: the world's registrations come back from their columns as they went in: every field of
// Member, whether every member has it alike or not, text with line breaks, and in chunks of a bounded size.
func TestWorldColumns(t *testing.T) {
	distinct := make([]rendezvous.Member, 5)
	for i := range distinct {
		fillMember(t, &distinct[i], i)
	}
	alike := make([]rendezvous.Member, 4)
	for i := range alike {
		fillMember(t, &alike[i], 7)
	}
	broken := slices.Clone(distinct)
	broken[2].Host = "two\nlines"
	for name, members := range map[string][]rendezvous.Member{"distinct": distinct, "alike": alike, "line break": broken, "one": distinct[:1]} {
		t.Run(name, func(t *testing.T) {
			b := encodeColumns(members)
			got, err := decodeColumns(b)
			if err != nil {
				t.Fatalf("%v: %s", err, b)
			}
			if !reflect.DeepEqual(got, members) {
				t.Fatalf("decoded\n%+v\nwant\n%+v\nfrom %s", got, members, b)
			}
		})
	}
	t.Run("chunks", func(t *testing.T) {
		many := make([]rendezvous.Member, 200)
		for i := range many {
			fillMember(t, &many[i], i)
		}
		const limit = 2000
		cs := chunks(many, limit)
		if len(cs) < 2 {
			t.Fatalf("%d chunks of at most %d bytes for %d bytes", len(cs), limit, len(encodeColumns(many)))
		}
		var got []rendezvous.Member
		for _, c := range cs {
			if len(c) > limit {
				t.Fatalf("a chunk of %d bytes, over %d", len(c), limit)
			}
			part, err := decodeColumns(c)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, part...)
		}
		if !reflect.DeepEqual(got, many) {
			t.Fatal("the chunks do not give the members back in order")
		}
	})
	for _, bad := range []string{`{"n":0}`, `{"n":2,"lines":{"host":"a"}}`, `{"n":2,"cols":{"rank":[1]}}`, `{"n":1,"same":{"rank":"x"}}`, `[`} {
		if _, err := decodeColumns([]byte(bad)); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}

// TestEtcdTally: the node that counts the registrations keeps them in registration order: one made again keeps
// its place, one that vanished and came back goes last, and the order survives its compaction.
func TestEtcdTally(t *testing.T) {
	reg := func(inst string) []byte {
		b, _ := json.Marshal(etcdRegistration{Member: rendezvous.Member{Instance: inst, Host: "h-" + inst}})
		return b
	}
	kvs := []*mvccpb.KeyValue{{Value: reg("c"), CreateRevision: 7}, {Value: reg("a"), CreateRevision: 5}}
	tl := newEtcdTally(kvs, 7)
	order := func(n int) string {
		var out []string
		for _, m := range tl.first(n) {
			out = append(out, m.Instance)
		}
		return strings.Join(out, ",")
	}
	if got := order(10); got != "a,c" {
		t.Fatalf("read: %s, want a,c (creation order)", got)
	}
	tl.put(reg("b"))
	tl.put(reg("a")) // registered again: keeps its place
	if got := order(10); got != "a,c,b" {
		t.Fatalf("after b and a again: %s", got)
	}
	tl.remove("a")
	tl.put(reg("a")) // vanished and came back: last
	if got := order(2); got != "c,b" {
		t.Fatalf("first 2 after a came back: %s", got)
	}
	for i := range 100 {
		inst := fmt.Sprintf("x%03d", i)
		tl.put(reg(inst))
		tl.remove(inst)
	}
	if got := order(10); got != "c,b,a" || len(tl.live) != 3 || len(tl.order) > 64+3 {
		t.Fatalf("after 100 came and went: %s, %d live, %d entries", got, len(tl.live), len(tl.order))
	}
}

// instanceOf is a fixed instance id: its order among the others decides which node counts the registrations.
func instanceOf(digit byte) string { return strings.Repeat(string(digit), 16) }

// testCounterGone: the node holding the first registration key (the one that counts) is killed before the world
// forms; when its key vanishes, the next node counts and the world forms without it.
func testCounterGone(t *testing.T, c *rdzvtest.Cluster) {
	ctx := context.Background()
	c.HB = time.Second
	c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
		m.RunID, m.Instance = "run", instanceOf(byte('1'+i))
	}
	which := c.Prepare(ctx, nil)
	cmd, _ := rdzvtest.StartNodeProcess(t, Name, c.Endpoint, 3, -1, c.HB, "RDZV_TEST_PREFIX="+c.Prefix,
		"RDZV_TEST_INSTANCE="+instanceOf('0'), "RDZV_TEST_HOST=node-first")
	rdzvtest.WaitRegistered(t, c, 1)
	rdzvtest.Killed(t, cmd)
	c.Join(ctx, which) // nobody counts until its key vanishes: then node-0 does
	c.MustJoin()
	rdzvtest.AgreeOn(t, c.Sess, 0, "node-0", "node-1", "node-2")
}

// testCounterRetires: the node counting the registrations sees a lower key registered and leaves the count to
// it; that node is killed before the world forms; when its key vanishes, the first node counts again.
func testCounterRetires(t *testing.T, c *rdzvtest.Cluster) {
	ctx := context.Background()
	c.HB = time.Second
	core, logs := observer.New(zapcore.DebugLevel)
	c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
		m.RunID, m.Instance = "run", instanceOf(byte('5'+i))
		if i == 0 {
			cfg.Logger = zap.New(core)
		}
	}
	c.Prepare(ctx, nil)
	_, m0 := c.Config(0)
	first := make(chan error, 1)
	go func() {
		var err error
		c.Sess[0], err = c.Rdzv[0].Join(ctx, m0)
		first <- err
	}()
	testutil.Eventually(t, "node-0 to count the registrations", func() bool {
		return logs.FilterMessageSnippet("this node counts the registrations").Len() == 1
	})
	cmd, _ := rdzvtest.StartNodeProcess(t, Name, c.Endpoint, 3, -1, c.HB, "RDZV_TEST_PREFIX="+c.Prefix,
		"RDZV_TEST_INSTANCE="+instanceOf('0'), "RDZV_TEST_HOST=node-lower")
	rdzvtest.WaitRegistered(t, c, 2)
	rdzvtest.Killed(t, cmd)
	c.Join(ctx, []int{1, 2})
	if err := testutil.Done(t, "node-0's join", first); err != nil {
		t.Fatal(err)
	}
	c.MustJoin()
	rdzvtest.AgreeOn(t, c.Sess, 0, "node-0", "node-1", "node-2")
	if n := logs.FilterMessageSnippet("this node counts the registrations").Len(); n != 2 {
		t.Fatalf("node-0 started counting %d times, want 2 (before the lower key, and after it vanished)", n)
	}
}

// testChunkedWorld: a world too large for one value (here: chunks of 300 bytes) is written in chunks and read
// back whole by every node.
func testChunkedWorld(t *testing.T, c *rdzvtest.Cluster) {
	defer func(n int) { worldChunk = n }(worldChunk)
	worldChunk = 300
	rdzvtest.AgreedWorld(t, c)
}

// TestEtcdPodWorld: a world of 64 nodes on etcd (the pod sizes are the benchmarks': 1024 formed and held), one of them a launcher process, all joining at once: it forms,
// every node holds it while the process's lease runs out after the process is killed (two heartbeats), and every
// node then hears that node lost, and only it; a barrier fails naming it. The heartbeat is 3 s: under -race, on a
// machine whose two cores run other suites too, a 2 s one lost a live node in 1 of 5 runs (its lease unrenewed
// for 4 s); the benchmark holds 1024 nodes with 2 s on a machine left to it.
func TestEtcdPodWorld(t *testing.T) {
	if testing.Short() {
		t.Skip("etcd, 64 nodes: not in -short")
	}
	const n = 64
	ec := etcdtest.Start(t, 1)
	c := newEtcdCluster(t, ec, n)
	c.HB = 3 * time.Second
	c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) { m.RunID = "run" }
	ctx := context.Background()
	cmd, lines := rdzvtest.StartNodeProcess(t, Name, c.Endpoint, n, -1, c.HB, "RDZV_TEST_PREFIX="+c.Prefix, "RDZV_TEST_HOST=node-process")
	which := make([]int, n-1)
	for i := range which {
		which[i] = i
	}
	c.Start(ctx, which)
	for _, i := range which {
		if c.Errs[i] != nil {
			t.Fatalf("node %d: %v", i, c.Errs[i])
		}
	}
	rdzvtest.WaitLine(t, lines, "joined ")
	rdzvtest.Killed(t, cmd)
	for _, i := range which {
		if f := rdzvtest.WaitFailure(t, c.Sess[i]); !f.Lost || f.Node.Host != "node-process" {
			t.Fatalf("node %d heard %v first, want node-process lost", i, f)
		}
	}
	if e := rdzvtest.LostErr(t, c.Sess[0].Barrier(ctx, "after")); e.Node.Host != "node-process" {
		t.Fatalf("barrier after the loss: %v, want node-process lost", e)
	}
}

// testDeparturesCompacted: etcd compacts its history between the choice of the world and a node's watch of its
// departures (an etcd that compacts often, a slow node), and a node of the world vanished meanwhile: the node is
// still told that node is lost, and goes on (the watch's replay failed with "compacted": it reads the
// registrations instead).
func testDeparturesCompacted(t *testing.T, c *rdzvtest.Cluster) {
	ctx := context.Background()
	cli := etcdClient(t, c.Endpoint)
	c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
		m.RunID, m.Instance = "run", instanceOf(byte('a'+i))
	}
	var once sync.Once
	hookErr := make(chan error, 1)
	testBeforeDepartures = func(s *etcdSession) {
		if s.self.Instance != instanceOf('a') {
			return
		}
		once.Do(func() { // node-2's registration vanishes, and etcd forgets that it did
			r, err := cli.Delete(ctx, s.dir+"members/"+instanceOf('c'))
			if err == nil {
				_, err = cli.Compact(ctx, r.Header.Revision)
			}
			hookErr <- err
		})
	}
	defer func() { testBeforeDepartures = nil }()
	c.Start(ctx, nil)
	c.MustJoin()
	if err := testutil.Done(t, "node-0 to compact etcd", hookErr); err != nil {
		t.Fatal(err)
	}
	if f := rdzvtest.WaitFailure(t, c.Sess[0]); !f.Lost || f.Node.Host != "node-2" {
		t.Fatalf("node 0 heard %v, want node-2 lost", f)
	}
	if err := c.Sess[0].Err(); err != nil {
		t.Fatalf("node 0's session ended: %v", err)
	}
}

// testShareRead: each node reads its share of the agreed world (the head of all/world, what every node shares, its
// own node), not the world: in a world of 32 nodes, every node reads less than a quarter of the bytes of the world's
// registrations, where reading the whole world each made etcd serve 32 times the world (the square of the world:
// 1024 nodes on etcd-server starved its lease renewals).
func testShareRead(t *testing.T, c *rdzvtest.Cluster) {
	ctx := context.Background()
	c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
		m.RunID, m.UnevenWorkers = "run", true
		m.Host = fmt.Sprintf("a-host-name-as-long-as-a-cloud-vm-has-%d.c.project-name.internal", i)
	}
	var mu sync.Mutex
	read := map[string]int64{}
	testBeforeDepartures = func(s *etcdSession) {
		mu.Lock()
		defer mu.Unlock()
		read[s.self.Host] = s.worldRead.Load()
	}
	defer func() { testBeforeDepartures = nil }()
	c.Start(ctx, nil)
	c.MustJoin()
	cli := etcdClient(t, c.Endpoint)
	r, err := cli.Get(ctx, c.Prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	world := 0
	for _, kv := range r.Kvs {
		if strings.Contains(string(kv.Key), "/members/") {
			world += len(kv.Value)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(read) != len(c.Sess) {
		t.Fatalf("%d nodes settled the world, want %d", len(read), len(c.Sess))
	}
	for host, n := range read {
		if n <= 0 || n >= int64(world/4) {
			t.Errorf("%s read %d bytes of the world to settle it; the world's registrations are %d bytes: want its share, under a quarter", host, n, world)
		}
	}
}
