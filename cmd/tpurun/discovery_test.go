package main

import (
	cryptorand "crypto/rand"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/k8stest"
)

// The tests of issue 36 (SPEC-36.md, 1 and 2): the hosts of a TPU slice or a multislice, each a GKE pod
// (pod_test.go) running the command its manifest runs, form one world by themselves; the JobSets of
// examples/kubernetes run as pods do too.

// checkJobWorld checks that the workers of every started pod of c are one world over every slice of the JobSet,
// laid out from the pods' TPU env as SPEC-36 says (oneWorld), with MASTER_ADDR the first pod of slice 0 (its DNS
// name or its address) and the per-slice TPU env as each pod inherited it: TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, and
// TPU_PROCESS_ADDRESSES one list per slice naming that slice's pods in worker order. It returns the world.
func (c *cluster) checkJobWorld(t *testing.T) world {
	t.Helper()
	w := c.oneWorld(t)
	logged := t.Failed() // oneWorld showed the workers
	first := c.pods[0]
	if m := w[0].env["MASTER_ADDR"]; m != first.dns && m != first.addr {
		t.Errorf("MASTER_ADDR=%q: want the first pod of slice 0, %s (%s)", m, first.dns, first.addr)
	}
	w.each(t, "TPU_WORKER_ID", func(s seen) string { return strconv.Itoa(s.pod.worker) })
	w.each(t, "TPU_WORKER_HOSTNAMES", func(s seen) string { return inherited(s.pod, "TPU_WORKER_HOSTNAMES") })
	w.check(t, "the hosts of TPU_PROCESS_ADDRESSES", func(s seen) (string, string) {
		return strings.Join(addressHosts(s.env["TPU_PROCESS_ADDRESSES"]), ","), inherited(s.pod, "TPU_WORKER_HOSTNAMES")
	})
	for s := range c.slices() {
		w.of(s).same(t, "TPU_PROCESS_ADDRESSES")
	}
	if t.Failed() && !logged {
		t.Logf("the workers:\n%s", w.table())
	}
	return w
}

// oneWorld checks that the workers of every started pod of c are one world of every pod's chips, and returns it:
// RANK 0..N-1 each once; one MASTER_ADDR, one MASTER_PORT and one TORCHELASTIC_RUN_ID; WORLD_SIZE and
// JAX_NUM_PROCESSES N, JAX_PROCESS_ID the RANK; GROUP_RANK slice x hosts per slice + TPU_WORKER_ID, over
// GROUP_WORLD_SIZE nodes.
func (c *cluster) oneWorld(t *testing.T) world {
	t.Helper()
	pods := c.started()
	n := 0
	for _, p := range pods {
		n += p.spec.TPU.ChipsPerHost
	}
	w := worldOf(t, pods...)
	w.ranks(t, n)
	w.same(t, "MASTER_ADDR")
	w.same(t, "MASTER_PORT")
	w.same(t, "TORCHELASTIC_RUN_ID")
	w.is(t, "WORLD_SIZE", strconv.Itoa(n))
	w.is(t, "JAX_NUM_PROCESSES", strconv.Itoa(n))
	w.each(t, "JAX_PROCESS_ID", func(s seen) string { return s.env["RANK"] })
	w.is(t, "GROUP_WORLD_SIZE", strconv.Itoa(len(pods)))
	w.each(t, "GROUP_RANK", func(s seen) string { return strconv.Itoa(s.pod.slice*s.pod.spec.TPU.Hosts + s.pod.worker) })
	if t.Failed() {
		t.Logf("the workers:\n%s", w.table())
	}
	return w
}

// inherited is the value of key in the pod's own environment.
func inherited(p *pod, key string) string {
	for _, kv := range p.env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v
		}
	}
	return ""
}

// seen is what one worker saw: its pod and its environment.
type seen struct {
	pod *pod
	env map[string]string
}

// world is what the envdump workers of some pods saw, by RANK.
type world map[int]seen

// worldOf reads the env of every worker of pods; a RANK seen twice, or not a number, fails the test.
func worldOf(t *testing.T, pods ...*pod) world {
	t.Helper()
	w := world{}
	for _, p := range pods {
		for _, env := range p.host.dumped(t) {
			r, err := strconv.Atoi(env["RANK"])
			if err != nil {
				t.Fatalf("pod %s: a worker with RANK=%q", p.hostname, env["RANK"])
			}
			if prev, dup := w[r]; dup {
				t.Fatalf("RANK %d ran twice: on %s and on %s\n%s", r, prev.pod.hostname, p.hostname, world{0: prev, 1: {p, env}}.table())
			}
			w[r] = seen{p, env}
		}
	}
	return w
}

// table is one line per worker of the keys that say which world it is in, for a failure's message.
func (w world) table() string {
	var b strings.Builder
	for _, r := range slices.Sorted(maps.Keys(w)) {
		s := w[r]
		fmt.Fprintf(&b, "  %s: RANK=%s GROUP_RANK=%s WORLD_SIZE=%s MASTER=%s:%s RUN_ID=%s TPU_WORKER_ID=%s "+
			"MEGASCALE_SLICE_ID=%s\n",
			s.pod.hostname, s.env["RANK"], s.env["GROUP_RANK"], s.env["WORLD_SIZE"], s.env["MASTER_ADDR"], s.env["MASTER_PORT"],
			s.env["TORCHELASTIC_RUN_ID"], s.env["TPU_WORKER_ID"], s.env["MEGASCALE_SLICE_ID"])
	}
	return b.String()
}

// ranks fails the test unless the world is RANK 0..n-1, each once.
func (w world) ranks(t *testing.T, n int) {
	t.Helper()
	for r := range n {
		if _, ok := w[r]; !ok || len(w) != n {
			t.Fatalf("%d workers ran, want RANK 0..%d each once:\n%s", len(w), n-1, w.table())
		}
	}
}

// same fails the test unless every worker has one value of key (set); it returns it.
func (w world) same(t *testing.T, key string) string {
	t.Helper()
	vals := map[string][]string{}
	for _, s := range w {
		vals[s.env[key]] = append(vals[s.env[key]], s.pod.hostname)
	}
	if len(vals) != 1 {
		var b strings.Builder
		for v, pods := range vals {
			slices.Sort(pods)
			fmt.Fprintf(&b, "  %s=%q on %s\n", key, v, strings.Join(slices.Compact(pods), ","))
		}
		t.Errorf("the workers disagree on %s:\n%s", key, b.String())
		return ""
	}
	for v := range vals {
		if v == "" {
			t.Errorf("no worker has %s", key)
		}
		return v
	}
	return ""
}

// each fails the test for every worker whose key is not want(worker) (the first few named).
func (w world) each(t *testing.T, key string, want func(s seen) string) {
	t.Helper()
	w.check(t, key, func(s seen) (string, string) { return s.env[key], want(s) })
}

// is fails the test for every worker whose key is not want.
func (w world) is(t *testing.T, key, want string) {
	t.Helper()
	w.each(t, key, func(seen) string { return want })
}

// check fails the test for every worker whose got differs from its want (the first few named, as what).
func (w world) check(t *testing.T, what string, f func(s seen) (got, want string)) {
	t.Helper()
	var bad []string
	for _, r := range slices.Sorted(maps.Keys(w)) {
		s := w[r]
		if got, want := f(s); got != want {
			bad = append(bad, fmt.Sprintf("RANK %d on %s: %s=%q, want %q", r, s.pod.hostname, what, got, want))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s: %d of %d workers wrong:\n  %s", what, len(bad), len(w), strings.Join(bad[:min(len(bad), 6)], "\n  "))
	}
}

// of is the part of the world that ran on pods of slice s.
func (w world) of(s int) world {
	out := world{}
	for r, x := range w {
		if x.pod.slice == s {
			out[r] = x
		}
	}
	return out
}

// addressHosts are the hosts of TPU_PROCESS_ADDRESSES (host:port,...), each once, in order.
func addressHosts(v string) []string {
	var out []string
	for _, a := range strings.Split(v, ",") {
		h, _, err := net.SplitHostPort(a)
		if err != nil {
			h = a
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// secret is a rendezvous token as a Secret would hold it.
func secret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	_, err := cryptorand.Read(b)
	mustDo(t, err)
	return fmt.Sprintf("%x", b)
}

// TestPodsSliceFormsOneWorld (issue 36, 1): the two pods of a v4-16 slice, given what GKE gives (TPU_WORKER_ID 0
// and 1, TPU_WORKER_HOSTNAMES naming both, TPU_ACCELERATOR_TYPE, TPU_SKIP_MDS_QUERY=true), each running a plain
// `tpurun -- PROGRAM`, form one world of 8: node 0 is the first host of TPU_WORKER_HOSTNAMES.
func TestPodsSliceFormsOneWorld(t *testing.T) {
	t.Parallel()
	c := newCluster(t, jobset{name: "slice", rjob: "tpu", accel: "v4-16", command: []string{"tpurun", "--", self(t)}})
	c.start(c.pods...)
	c.waitAll(0)
	c.checkJobWorld(t)
}

// TestPodsInconsistentMultisliceExits2 (issue 36): a multislice pod whose env cannot say the job consistently
// (MEGASCALE_NUM_SLICES=2 and no MEGASCALE_COORDINATOR_ADDRESS: a manifest that forgot to map it) exits 2 at once,
// naming the variable, and starts no worker.
func TestPodsInconsistentMultisliceExits2(t *testing.T) {
	t.Parallel()
	c := newCluster(t, jobset{name: "broken", rjob: "slice", slices: 2, accel: "v4-16", identity: true, token: true,
		unmapped: []string{"MEGASCALE_COORDINATOR_ADDRESS"}, command: []string{"tpurun", "--", self(t)}})
	slice1 := c.pods[2:]
	for _, p := range slice1 {
		if _, ok := p.spec.LookupEnv("MEGASCALE_COORDINATOR_ADDRESS"); ok || p.spec.Getenv("MEGASCALE_NUM_SLICES") != "2" {
			t.Fatalf("pod %s: MEGASCALE_NUM_SLICES=%q and MEGASCALE_COORDINATOR_ADDRESS set %v; want 2 and unset", p.hostname,
				p.spec.Getenv("MEGASCALE_NUM_SLICES"), ok)
		}
	}
	c.start(slice1...) // the default --rdzv-timeout (5m) is past the deadline: only an exit at once passes
	c.waitAll(2)
	for _, p := range slice1 {
		if !strings.Contains(p.stderr.String(), "MEGASCALE_COORDINATOR_ADDRESS") {
			t.Errorf("pod %s does not name MEGASCALE_COORDINATOR_ADDRESS:\n%s", p.hostname, p.stderr.String())
		}
		if d := p.host.dumped(t); len(d) != 0 {
			t.Errorf("pod %s started %d workers", p.hostname, len(d))
		}
	}
}

// TestPodsEndpointNotYetResolvable (issue 36, 4): pod 1 starts while pod 0's name does not resolve yet (the
// headless service publishes pods as they start); it says so once and waits, within --rdzv-timeout, and the world
// forms once the name resolves (the cluster DNS publishes pod 0).
func TestPodsEndpointNotYetResolvable(t *testing.T) {
	t.Parallel()
	c := newCluster(t, jobset{name: "late", rjob: "slice", accel: "v4-16", identity: true, token: true,
		command: []string{"tpurun", "--", self(t)}})
	p0, p1 := c.pods[0], c.pods[1]
	p1.unlist(p0)
	c.start(p0, p1)
	// A line that says pod 0's name does not resolve (yet): it names the host and says so ("does not resolve",
	// "unresolvable", "no such host", "not yet"). A line saying that it resolves now is none.
	notResolving := []string{"not resolv", "n't resolv", "unresolv", "no such host", "not yet"}
	waiting := func(l string) bool {
		low := strings.ToLower(l)
		says := func(s string) bool { return strings.Contains(low, s) }
		return strings.Contains(l, p0.dns) && slices.ContainsFunc(notResolving, says)
	}
	c.waitLine(p1, "that "+p0.dns+" does not resolve yet", waiting)
	c.publish(p0)
	c.waitAll(0)
	c.checkJobWorld(t)
	if l := lines(p1.stderr.String(), waiting); len(l) != 1 {
		t.Errorf("pod %s: %d lines about %s not resolving, want 1:\n%s", p1.hostname, len(l), p0.dns, strings.Join(l, "\n"))
	}
}

// TestPodsTorchrunStaticLineWithoutToken (issue 36, 5): torchrun's own static line, as a torchrun user writes it
// in a JobSet of two pods (`--nnodes=2 --node_rank=$(JOB_COMPLETION_INDEX) --master_addr=<pod 0>
// --master_port=29500`, as JobSet's PyTorch example does; no token), runs one world of both (GROUP_RANK the
// --node_rank, MASTER_PORT as given), and each node warns once, naming TPURUN_RDZV_TOKEN; the messages say each
// thing once (no line twice, no flag the user never typed).
//
// Not checked: which address MASTER_ADDR and the TPU host list name. A node of this line names itself by its
// address toward the endpoint, and every pod here shares the machine's loopback, where that address is 127.0.0.1
// (a real pod's is its own IP, what its name resolves to).
func TestPodsTorchrunStaticLineWithoutToken(t *testing.T) {
	t.Parallel()
	c := newCluster(t, jobset{name: "torchrun", rjob: "node", accel: "v4-16", command: []string{"tpurun", "--nnodes=2",
		"--node_rank=$(JOB_COMPLETION_INDEX)", "--master_addr=torchrun-node-0-0.torchrun", "--master_port=29500", self(t)}})
	if c.pods[0].dns != "torchrun-node-0-0.torchrun" {
		t.Fatalf("pod 0 is %s, not the --master_addr the manifest names", c.pods[0].dns)
	}
	c.start(c.pods...)
	c.waitAll(0)
	c.oneWorld(t).is(t, "MASTER_PORT", "29500")
	for _, p := range c.pods {
		stderr := p.stderr.String()
		warn := lines(stderr, func(l string) bool { return strings.Contains(l, "TPURUN_RDZV_TOKEN") })
		if len(warn) != 1 {
			t.Errorf("pod %s: %d lines name TPURUN_RDZV_TOKEN, want one warning:\n%s", p.hostname, len(warn), stderr)
			continue
		}
		if strings.Count(warn[0], "TPURUN_RDZV_TOKEN") != 1 || strings.Contains(warn[0], "--rdzv-endpoint") {
			t.Errorf("pod %s: the warning names TPURUN_RDZV_TOKEN more than once, or --rdzv-endpoint (never typed):\n%s",
				p.hostname, warn[0])
		}
		seenLine := map[string]bool{}
		for _, l := range lines(stderr, func(l string) bool { return strings.TrimSpace(l) != "" }) {
			if seenLine[l] {
				t.Errorf("pod %s says this twice: %s", p.hostname, l)
			}
			seenLine[l] = true
		}
	}
}

// TestPodsSingleHostOnPurpose (issue 36): `tpurun --nnodes 1 -- PROGRAM` on one pod of a 2-host slice runs a world
// of this host alone (its 4 workers) and says once that it runs alone although the host is one of 2.
func TestPodsSingleHostOnPurpose(t *testing.T) {
	t.Parallel()
	c := newCluster(t, jobset{name: "alone", rjob: "slice", accel: "v4-16",
		command: []string{"tpurun", "--nnodes", "1", "--", self(t)}})
	p := c.pods[1]
	c.start(p)
	c.waitAll(0)
	w := worldOf(t, p)
	w.ranks(t, chipsPerPod)
	w.is(t, "WORLD_SIZE", strconv.Itoa(chipsPerPod))
	w.is(t, "JAX_NUM_PROCESSES", strconv.Itoa(chipsPerPod))
	w.is(t, "GROUP_RANK", "0")
	w.is(t, "GROUP_WORLD_SIZE", "1")
	if t.Failed() {
		t.Logf("the workers:\n%s", w.table())
	}
	alone := lines(p.stderr.String(), func(l string) bool { return strings.Contains(l, "alone") })
	if len(alone) != 1 || !strings.Contains(alone[0], "TPU_WORKER_HOSTNAMES") && !strings.Contains(alone[0], "of 2") {
		t.Errorf("pod %s: want one line saying it runs alone although it is one of 2 hosts (TPU_WORKER_HOSTNAMES); got %d:\n%s",
			p.hostname, len(alone), p.stderr.String())
	}
}

// exampleJobSets are the JobSets of examples/kubernetes (every file there) that TestPodsJobSetExamples runs as
// pods. Each runs once, at restart attempt 0: both manifests map the run id's parts alike (examples/kubernetes'
// TestManifestShape), and JobSetRunID makes another attempt's run id (TestJobSetRunID); a second attempt of 4 or 8
// pods would cost the suite as much again as the first.
var exampleJobSets = []string{"jobset-slice.yaml", "jobset-multislice.yaml"}

// TestPodsJobSetExamples (issue 36, 1, 2 and 4; SPEC-36 2 and 3): every pod of each JobSet of examples/kubernetes,
// all started at once, each with exactly the environment k8stest.Pods gives it (the Secret's token from the test's
// cluster) and its own argv, forms ONE world of the JobSet's pods (checkJobWorld), whose run id is the JobSet's uid
// and restart attempt (JOBSET_UID-JOBSET_RESTART_ATTEMPT; another attempt's differs: TestJobSetRunID). The
// multislice job (2 x v6e-16, 4 pods a slice) is one world of 32 over both slices: RANK, GROUP_RANK and WORLD_SIZE
// job-wide, TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, TPU_PROCESS_ADDRESSES and CLOUD_TPU_TASK_ID per slice,
// MEGASCALE_COORDINATOR_ADDRESS kept byte for byte as inherited; and `tpurun plan` in a pod of slice 1 shows that
// world.
//
// One substitution in the pods' argv: the program after "--" (python3 /app/examples/train.py) is this test binary
// as the envdump worker, which records what each worker was given. train.py imports torch in every worker: 48
// of them would cost the suite more than the world they form is worth here, and the doc test runs
// train.py under tpurun.
func TestPodsJobSetExamples(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "..", "examples", "kubernetes")
	files, err := filepath.Glob(filepath.Join(dir, "*.y*ml"))
	mustDo(t, err)
	var want []string
	for _, f := range exampleJobSets {
		want = append(want, filepath.Join(dir, f))
	}
	slices.Sort(files)
	if slices.Sort(want); !slices.Equal(files, want) {
		t.Fatalf("examples/kubernetes has %q; this test runs %q", files, want)
	}
	testutil.Heavy(t) // 12 pods, 48 workers
	for _, f := range exampleJobSets {
		t.Run(f, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, f))
			mustDo(t, err)
			m, err := k8stest.DecodeJobSet(b)
			mustDo(t, err)
			c := newClusterOf(t, m, k8stest.Cluster{UID: newUID(t), RestartAttempt: 0,
				Secrets: map[string]map[string]string{tokenSecret: {tokenKey: secret(t)}}})
			for _, p := range c.pods {
				p.command = withProgram(t, p.command, self(t))
			}
			c.start(c.pods...)
			c.waitAll(0)
			w := c.checkJobWorld(t)
			w.is(t, "TORCHELASTIC_RUN_ID", c.k.UID+"-0") // JOBSET_UID-JOBSET_RESTART_ATTEMPT
			if c.slices() > 1 {
				checkMultislice(t, c, w)
			}
		})
	}
}

// checkMultislice holds the world of a multislice cluster of 2 slices of 4 pods (4 chips each) to what slices
// share and what each keeps (TestPodsJobSetExamples), and `tpurun plan` in slice 1's worker 2 to the job's world.
func checkMultislice(t *testing.T, c *cluster, w world) {
	t.Helper()
	w.is(t, "MEGASCALE_COORDINATOR_ADDRESS", inherited(c.pods[0], "MEGASCALE_COORDINATOR_ADDRESS")) // byte for byte
	w.is(t, "MEGASCALE_NUM_SLICES", strconv.Itoa(c.slices()))
	w.each(t, "MEGASCALE_SLICE_ID", func(s seen) string { return strconv.Itoa(s.pod.slice) })
	w.each(t, "CLOUD_TPU_TASK_ID", func(s seen) string { // per slice
		lr, _ := strconv.Atoi(s.env["LOCAL_RANK"])
		return strconv.Itoa(s.pod.worker*chipsPerPod + lr)
	})
	p := c.pods[6] // slice 1, worker 2: node rank 6
	r := p.exec("tpurun", "plan", "--format", "json")
	var plan planJSON
	if err := json.Unmarshal([]byte(r.stdout), &plan); r.code != 0 || err != nil {
		t.Fatalf("tpurun plan --format json in %s: exit %d (%v)\n%s%s", p.hostname, r.code, err, r.stdout, r.stderr)
	}
	mine := 0
	for _, wk := range plan.Workers {
		if wk.NodeRank == 6 {
			mine++
		}
	}
	if len(plan.Workers) != 32 || len(plan.Nodes) != 8 || mine != chipsPerPod {
		t.Errorf("tpurun plan in %s: %d workers on %d nodes, %d of node rank 6; want the job's 32 on 8 nodes, 4 on node rank 6",
			p.hostname, len(plan.Workers), len(plan.Nodes), mine)
	}
	r = p.exec("tpurun", "plan")
	if first, _, _ := strings.Cut(r.stdout, "\n"); r.code != 0 || !strings.HasPrefix(first, "this host: node 6;") {
		t.Errorf("tpurun plan in %s: exit %d, first line %q; want it to say node 6 (slice 1 x 4 hosts + worker 2)",
			p.hostname, r.code, first)
	}
}

// withProgram is argv with the program after its "--" replaced by prog (tpurun's flags before it kept); argv with
// no "--" and a program after it fails the test.
func withProgram(t *testing.T, argv []string, prog ...string) []string {
	t.Helper()
	i := slices.Index(argv, "--")
	if i < 0 || i == len(argv)-1 {
		t.Fatalf("the pod runs %q: no program after --", argv)
	}
	return append(slices.Clone(argv[:i+1]), prog...)
}
