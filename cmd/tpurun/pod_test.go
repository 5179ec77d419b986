package main

import (
	cryptorand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"tpurun/internal/spec"
	"tpurun/internal/testutil"
	"tpurun/internal/testutil/k8stest"
)

// GKE pods as processes (STYLE.md 17): a pod is tpurun started in a mount and a UTS namespace of its own, with
//
//   - its own /etc/hosts (bind-mounted over /etc/hosts in its mount namespace only) resolving every pod's DNS name
//     <jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain> to that pod's own loopback address 127.A.B.C (A.B
//     picked at random per test, so that concurrent tests never share an address), and its own /etc/resolv.conf
//     naming the test's cluster DNS, which answers every query NXDOMAIN as kube-dns answers a name it does not
//     know (yet);
//   - its hostname set as GKE sets it, <jobset>-<replicatedJob>-<jobIndex>-<podIndex>;
//   - a fake TPU tree (newHost's);
//   - only the environment its image, the kubelet, GKE's TPU webhook, the TPU device plugin, JobSet (through the
//     downward API) and the manifest give, plus the test plumbing of podPlumbing: k8stest.Pods says what a pod of a
//     JobSet sees (internal/testutil/k8stest is the one model of those rules), and this file takes every pod's hostname, DNS
//     name, environment and argv from it;
//   - the command the manifest runs, from the image's PATH ("tpurun" is found there), and nothing else.
//
// The pod's process is the test binary re-executed as the podinit verb: inside its new namespaces it makes mount
// propagation private, bind-mounts the pod's files, sets the hostname and execs the command, so that the pod's pid
// is tpurun's and a signal to the pod is a signal to tpurun. Pods share the machine's network namespace (each binds
// only its own address), its /tmp and its process table: what a real pod has of its own beyond that (a network
// namespace with its own ports, a pid namespace) these tests do not need.

// Two verbs: podinit, a pod's first process; podlook, a process that tells what it sees in a pod.
func init() {
	testutil.Define(testutil.Verb{Name: "podinit", Run: podInit})
	testutil.Define(testutil.Verb{Name: "podlook", Run: podLook})
}

// podConfig is what podinit does before it execs the pod's command: its first argument, as JSON.
type podConfig struct {
	Hostname string      `json:"hostname"`
	Mounts   [][2]string `json:"mounts"` // a file of the test (source) bind-mounted over a file of the pod (target)
	Verb     string      `json:"verb"`   // when the command is the test binary: the verb it does (FAKE_VERB)
}

// podInit is the pod's first process: it enters the pod (podConfig, args[0]) and execs its command (args[1:]),
// looked up on the pod's PATH, with the pod's environment.
func podInit(w *testutil.Worker) int {
	if len(w.Args) < 2 {
		fmt.Fprintln(os.Stderr, "podinit: want a JSON config and a command")
		return 125
	}
	var c podConfig
	if err := json.Unmarshal([]byte(w.Args[0]), &c); err != nil {
		fmt.Fprintln(os.Stderr, "podinit:", err)
		return 125
	}
	if err := c.enter(); err != nil {
		fmt.Fprintln(os.Stderr, "podinit:", err)
		return 125
	}
	path, err := exec.LookPath(w.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "podinit:", err)
		return 127
	}
	env := os.Environ()
	if c.Verb != "" {
		env = append(env, testutil.EnvVerb+"="+c.Verb)
	}
	err = syscall.Exec(path, w.Args[1:], env)
	fmt.Fprintf(os.Stderr, "podinit: exec %s: %v\n", path, err)
	return 126
}

// enter makes this process's namespaces (new ones, from the clone that started it) the pod's: mount propagation
// private first (a bind mount here must never reach the machine's namespace), then the pod's files and hostname.
func (c podConfig) enter() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	for _, m := range c.Mounts {
		if err := unix.Mount(m[0], m[1], "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mount %s over %s: %w", m[0], m[1], err)
		}
	}
	if err := unix.Sethostname([]byte(c.Hostname)); err != nil {
		return fmt.Errorf("sethostname %s: %w", c.Hostname, err)
	}
	return nil
}

// podView is what a process in a pod sees (podlook's output).
type podView struct {
	Hostname string              `json:"hostname"`
	Env      []string            `json:"env"`
	Hosts    map[string][]string `json:"hosts"`     // each name asked for: the addresses it resolves to
	NotFound map[string]bool     `json:"not_found"` // each name that does not resolve: whether as "no such host"
}

// podLook prints, as JSON, the podView of this process, resolving the names of its arguments.
func podLook(w *testutil.Worker) int {
	v := podView{Env: os.Environ(), Hosts: map[string][]string{}, NotFound: map[string]bool{}}
	v.Hostname, _ = os.Hostname()
	for _, name := range w.Args {
		addrs, err := net.LookupHost(name)
		var dns *net.DNSError
		if errors.As(err, &dns) {
			v.NotFound[name] = dns.IsNotFound
		}
		v.Hosts[name] = addrs
	}
	if err := json.NewEncoder(os.Stdout).Encode(v); err != nil {
		return 1
	}
	return 0
}

// jobset is a JobSet of TPU slices as a pod test writes it (k8stest.TPUJobSet: one replicatedJob whose replicas
// are the slices, each an Indexed Job of one pod per host, every pod running the same container of chipsPerPod
// chips). What each pod sees of it is k8stest.Pods' to say, not this file's.
type jobset struct {
	name     string   // metadata.name: the pods' names start with it, and it is their subdomain (the headless service)
	rjob     string   // the replicatedJob's name
	slices   int      // its replicas (1 when 0): with more than one the manifest maps MEGASCALE_* (downward API)
	accel    string   // the slices' accelerator type: a key of nodePools
	identity bool     // the manifest maps JOBSET_NAME, JOBSET_UID, JOBSET_RESTART_ATTEMPT (downward API)
	token    bool     // the manifest maps TPURUN_RDZV_TOKEN from the Secret tpurun-rdzv (the test's cluster holds one)
	unmapped []string // names of what the manifest maps above that it leaves out (a manifest that forgot them)
	command  []string // the container's command, $(VAR) as the kubelet expands it
}

// nodePools are the nodeSelectors a manifest writes for the slices of these tests (GKE's TPU docs: a node pool's
// accelerator and topology labels); k8stest derives each pod's TPU_ACCELERATOR_TYPE from them.
var nodePools = map[string]struct{ accelerator, topology string }{
	"v4-16":        {"tpu-v4-podslice", "2x2x2"},
	"v5litepod-16": {"tpu-v5-lite-podslice", "4x4"},
}

// chipsPerPod is the chips the pods of a jobset request: every host of their slices.
const chipsPerPod = 4

// The Secret the examples' manifests read the rendezvous token from (its name and key).
const tokenSecret, tokenKey = "tpurun-rdzv", "token"

// manifest is the JobSet js describes, its env mapped as examples/kubernetes maps it.
func (js jobset) manifest(t *testing.T) *k8stest.JobSet {
	t.Helper()
	pool, ok := nodePools[js.accel]
	if !ok {
		t.Fatalf("no node pool for %s", js.accel)
	}
	var env []corev1.EnvVar
	if js.token {
		env = append(env, k8stest.FromSecret("TPURUN_RDZV_TOKEN", tokenSecret, tokenKey))
	}
	if js.identity {
		env = append(env, k8stest.FromAnnotation(spec.EnvJobSetName, k8stest.JobSetNameKey),
			k8stest.FromAnnotation(spec.EnvJobSetUID, k8stest.JobSetUIDKey),
			k8stest.FromAnnotation(spec.EnvJobSetRestartAttempt, k8stest.RestartsKey))
	}
	if js.slices > 1 {
		env = append(env, k8stest.FromAnnotation("MEGASCALE_NUM_SLICES", k8stest.GlobalReplicasKey),
			k8stest.FromAnnotation("MEGASCALE_SLICE_ID", k8stest.JobGlobalIndexKey),
			k8stest.FromAnnotation("MEGASCALE_COORDINATOR_ADDRESS", k8stest.CoordinatorKey))
	}
	env = slices.DeleteFunc(env, func(e corev1.EnvVar) bool { return slices.Contains(js.unmapped, e.Name) })
	m, err := k8stest.TPUJobSet{Name: js.name, ReplicatedJob: js.rjob, Slices: js.slices, Accelerator: pool.accelerator,
		Topology: pool.topology, ChipsPerHost: chipsPerPod, Command: js.command, Env: env}.JobSet()
	mustDo(t, err)
	return m
}

// newUID is a uid as Kubernetes gives an object (a random UUID).
func newUID(t *testing.T) string {
	t.Helper()
	var b [16]byte
	_, err := cryptorand.Read(b[:])
	mustDo(t, err)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// pod is one running (or runnable) pod of a cluster.
type pod struct {
	spec          k8stest.Pod // the pod as Kubernetes makes it: its hostname, DNS name, TPU, env and argv
	slice, worker int         // its Job's index over the JobSet (the slice) and its completion index (TPU_WORKER_ID)
	hostname      string      // spec.Hostname, <jobset>-<rjob>-<slice>-<worker>
	dns           string      // spec.DNSName, <hostname>.<subdomain>: what the other pods resolve
	env           []string    // spec.Env and the test's plumbing (podPlumbing): the whole environment
	command       []string    // spec.Argv
	addr          string      // its own address, 127.A.B.C
	host          *host       // its fake TPU tree; its envdump workers write under host.dumps
	dir           string      // its files: hosts, resolv.conf, nsswitch.conf, and its working directory
	etcHosts      string      // the file bind-mounted over its /etc/hosts
	listed        map[string]bool
	cluster       *cluster
	*node         // once started
}

// cluster is the pods of one test: a network 127.A.B.0/24 of their own (the cluster DNS on .253) and the pods.
type cluster struct {
	t    *testing.T
	k    k8stest.Cluster // what the JobSet's manifest does not say: its uid, restart attempt, Secrets, the image
	net  string          // "127.A.B."
	pods []*pod          // slice by slice, in worker order

	mu        sync.Mutex
	published map[string]net.IP // the cluster DNS's A records: the pods the headless service has published
}

// newCluster prepares the pods of js (none started) in a cluster of its own: a new uid, restart attempt 0, and a
// random token in the Secret tpurun-rdzv.
func newCluster(t *testing.T, js jobset) *cluster {
	t.Helper()
	return newClusterOf(t, js.manifest(t), k8stest.Cluster{UID: newUID(t),
		Secrets: map[string]map[string]string{tokenSecret: {tokenKey: secret(t)}}})
}

// chipIDs are the Google PCI device ids of the fake TPU trees, by the generation of the pod's slice.
var chipIDs = map[string]string{"v4": idV4, "v5litepod": idV5e, "v6e": idV6e}

// imageEnv is the environment of examples/Dockerfile's image as the pods run it: tpurun on PATH (the tpurun the
// tests built, where the image has /usr/local/bin/tpurun), Debian's PATH after it.
func imageEnv() []string {
	return []string{"PATH=" + bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
}

// newClusterOf prepares the pods of the JobSet m in the cluster k (none started): each pod is what k8stest.Pods
// makes of it in k, in the image of imageEnv, with a fake host of its chips and an /etc/hosts naming every pod.
// It needs root and namespaces (fails under CI=true without them).
func newClusterOf(t *testing.T, m *k8stest.JobSet, k k8stest.Cluster) *cluster {
	t.Helper()
	testutil.Uses("podinit", "envdump") // before Need: a skipped test does not make its verbs look stale
	testutil.Need(t, "root")
	testutil.Need(t, "namespaces")
	k.ImageEnv = imageEnv()
	specs, err := k8stest.Pods(m, k)
	mustDo(t, err)
	c := &cluster{t: t, k: k, published: map[string]net.IP{}}
	c.net = c.serveDNS()
	for i, s := range specs {
		id, ok := "", s.TPU != nil
		if ok {
			id, ok = chipIDs[s.TPU.Generation]
		}
		if !ok || s.DNSName == "" {
			t.Fatalf("pod %s: TPU %+v, DNS name %q: the pod tests run pods of TPU slices of %v with DNS names",
				s.Hostname, s.TPU, s.DNSName, slices.Sorted(maps.Keys(chipIDs)))
		}
		p := &pod{spec: s, slice: s.JobGlobalIndex, worker: s.PodIndex, hostname: s.Hostname, dns: s.DNSName,
			command: s.Argv, addr: c.net + strconv.Itoa(i+1), host: newHost(t, id, s.TPU.ChipsPerHost), dir: t.TempDir(),
			listed: map[string]bool{}, cluster: c}
		p.etcHosts = filepath.Join(p.dir, "hosts")
		p.env = append(slices.Clone(s.Env), podPlumbing(p.host)...)
		c.pods = append(c.pods, p)
	}
	for _, p := range c.pods {
		for _, q := range c.pods {
			p.listed[q.dns] = true
		}
		mustDo(t, os.WriteFile(p.etcHosts, []byte(p.hostsFile()), 0o644))
		mustDo(t, os.WriteFile(filepath.Join(p.dir, "resolv.conf"), []byte("search "+p.spec.Namespace+
			".svc.cluster.local svc.cluster.local cluster.local\nnameserver "+c.net+"253\noptions ndots:5\n"), 0o644))
		mustDo(t, os.WriteFile(filepath.Join(p.dir, "nsswitch.conf"), []byte("hosts: files dns\n"), 0o644))
	}
	return c
}

// slices is the number of slices (Jobs) of the cluster's JobSet.
func (c *cluster) slices() int { return c.pods[len(c.pods)-1].slice + 1 }

// podPlumbing is what a pod's environment has that a real pod's does not: where its fake TPU tree is
// (TPURUN_SYSFS_ROOT, TPURUN_DEV_ROOT), a metadata server that refuses connections (GCE_METADATA_HOST: never a real
// one), and for its workers (the test binary) the verb they do (TPURUN_FAKE) and the race runtime's exit sleep off
// (GORACE). tpurun reads the first three only; no flag stands for any of them. (The image's PATH, imageEnv, names
// the tpurun the tests built.)
func podPlumbing(h *host) []string {
	out := []string{"TPURUN_SYSFS_ROOT=" + h.sys, "TPURUN_DEV_ROOT=" + h.dev, "GORACE=atexit_sleep_ms=0"}
	for _, kv := range h.env {
		if strings.HasPrefix(kv, "GCE_METADATA_HOST=") || strings.HasPrefix(kv, testutil.EnvFake+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// hostsFile is the pod's /etc/hosts: the kubelet's lines, then every pod this pod can resolve (listed), its own
// entry with its hostname.
func (p *pod) hostsFile() string {
	var b strings.Builder
	b.WriteString("# Kubernetes-managed hosts file, and the names the cluster DNS would answer (tpurun's pod tests).\n" +
		"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	for _, q := range p.cluster.pods {
		if p.listed[q.dns] {
			b.WriteString(q.hostsLine(q == p))
		}
	}
	return b.String()
}

// hostsLine is q's line in an /etc/hosts: its address, its DNS name with the cluster domain, its DNS name (and its
// hostname in its own file).
func (q *pod) hostsLine(own bool) string {
	l := q.addr + "\t" + q.dns + "." + q.spec.Namespace + ".svc.cluster.local\t" + q.dns
	if own {
		l += "\t" + q.hostname
	}
	return l + "\n"
}

// unlist takes q's name out of p's /etc/hosts before p starts: q is not yet published in the headless service,
// so p asks the cluster DNS for it, which does not know it until publish.
func (p *pod) unlist(q *pod) {
	p.listed[q.dns] = false
	mustDo(p.cluster.t, os.WriteFile(p.etcHosts, []byte(p.hostsFile()), 0o644))
}

// publish makes the cluster DNS answer q's name (bare and with the cluster domain) with q's address, as kube-dns
// does once the headless service publishes a pod: a pod that asks next gets it (Go caches no DNS answer).
func (c *cluster) publish(q *pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range []string{q.dns, q.dns + "." + q.spec.Namespace + ".svc.cluster.local"} {
		c.published[strings.ToLower(name)+"."] = net.ParseIP(q.addr).To4()
	}
}

// lookup is the cluster DNS's A record of name (fully qualified, with its final dot), nil when it has none.
func (c *cluster) lookup(name string) net.IP {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.published[strings.ToLower(name)]
}

// process is the pod's first process (podinit) running command, with the pod's environment; verb is the verb of a
// command that is the test binary ("" for any other).
func (p *pod) process(verb string, command []string) *exec.Cmd {
	files := [][2]string{{p.etcHosts, "/etc/hosts"}, {filepath.Join(p.dir, "resolv.conf"), "/etc/resolv.conf"}}
	if _, err := os.Stat("/etc/nsswitch.conf"); err == nil { // absent, Go's resolver reads files, then DNS
		files = append(files, [2]string{filepath.Join(p.dir, "nsswitch.conf"), "/etc/nsswitch.conf"})
	}
	cfg, err := json.Marshal(podConfig{Hostname: p.hostname, Mounts: files, Verb: verb})
	mustDo(p.cluster.t, err)
	cmd := exec.Command(testutil.Executable(), append([]string{string(cfg)}, command...)...)
	cmd.Env = append(slices.Clone(p.env), testutil.Self("podinit"))
	cmd.Dir = p.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS}
	return cmd
}

// start starts pods (all at once: none waits for another), each running its command.
func (c *cluster) start(pods ...*pod) {
	c.t.Helper()
	for _, p := range pods {
		p.node = runNode(c.t, p.process("", p.command))
	}
}

// exec runs command in p (as kubectl exec would: p's files, hostname and environment) to its end.
func (p *pod) exec(command ...string) result { return p.run("", command) }

func (p *pod) run(verb string, command []string) result {
	p.cluster.t.Helper()
	cmd := p.process(verb, command)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := testutil.WaitExit(p.cluster.t, cmd)
	return result{code, out.String(), errb.String()}
}

// look is what a process in p sees, names resolved.
func (p *pod) look(names ...string) podView {
	p.cluster.t.Helper()
	testutil.Uses("podlook")
	r := p.run("podlook", append([]string{testutil.Executable()}, names...))
	var v podView
	if err := json.Unmarshal([]byte(r.stdout), &v); r.code != 0 || err != nil {
		p.cluster.t.Fatalf("podlook in %s: exit %d (%v)\n%s%s", p.hostname, r.code, err, r.stdout, r.stderr)
	}
	return v
}

// started are the pods started so far.
func (c *cluster) started() []*pod {
	var out []*pod
	for _, p := range c.pods {
		if p.node != nil {
			out = append(out, p)
		}
	}
	return out
}

// waitLine waits until p writes a line on stderr that satisfies match, and returns it; p exiting first fails the
// test.
func (c *cluster) waitLine(p *pod, what string, match func(string) bool) string {
	c.t.Helper()
	var line string
	exited := false
	testutil.WaitFor(c.t, fmt.Sprintf("pod %s to write %s", p.hostname, what), func() error {
		select {
		case <-p.done:
			exited = true
		default:
		}
		if l := lines(p.stderr.String(), match); len(l) > 0 {
			line = l[0]
			return nil
		}
		if exited {
			return nil
		}
		return errors.New("not yet")
	})
	if line == "" {
		c.t.Fatalf("pod %s exited %d before it wrote %s:\n%s", p.hostname, p.code, what, c.describe())
	}
	return line
}

// waitAll waits for every started pod to exit and fails the test, showing every pod's stderr, unless each exited
// with want.
func (c *cluster) waitAll(want int) {
	c.t.Helper()
	ok := true
	for _, p := range c.started() {
		if p.wait(c.t) != want {
			ok = false
		}
	}
	if !ok {
		c.t.Fatalf("want every pod to exit %d:\n%s", want, c.describe())
	}
}

// describe is every started pod's exit and stderr.
func (c *cluster) describe() string {
	var b strings.Builder
	for _, p := range c.started() {
		code := "running"
		select {
		case <-p.done:
			code = "exit " + strconv.Itoa(p.code)
		default:
		}
		fmt.Fprintf(&b, "--- pod %s (%s, %s): %s\n%s", p.hostname, p.dns, p.addr, code, p.stderr.String())
	}
	return b.String()
}

// serveDNS picks the test's network 127.A.B.0/24 (A from 1, so never 127.0.0.x) and serves its cluster DNS on
// 127.A.B.253:53 until the test ends: a query for a published pod (publish) gets its A record, any other NXDOMAIN,
// as kube-dns answers a name that is not (yet) in a service. It returns "127.A.B.".
func (c *cluster) serveDNS() string {
	t := c.t
	t.Helper()
	for range 100 {
		n := fmt.Sprintf("127.%d.%d.", 1+rand.IntN(254), rand.IntN(256))
		pc, err := net.ListenPacket("udp4", n+"253:53")
		if err != nil {
			continue // another test's network (the socket is the reservation)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 1500)
			for {
				k, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				if r := c.answer(buf[:k]); r != nil {
					_, _ = pc.WriteTo(r, from)
				}
			}
		}()
		t.Cleanup(func() {
			_ = pc.Close()
			<-done
		})
		return n
	}
	t.Fatal("no free network 127.A.B.0/24 for the pods (a UDP socket on 127.A.B.253:53)")
	return ""
}

// answer is the cluster DNS's answer to the query q (RFC 1035 4.1: its header and question, with QR and RA): a
// published pod's A record (an AAAA query for it: no record, NOERROR), NXDOMAIN for any other name; nil when q is no
// query of one question.
func (c *cluster) answer(q []byte) []byte {
	if len(q) < 12 || q[2]&0x80 != 0 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	i := 12
	var name strings.Builder
	for i < len(q) && q[i] != 0 && q[i] < 64 {
		if i+1+int(q[i]) > len(q) {
			return nil
		}
		name.Write(q[i+1 : i+1+int(q[i])])
		name.WriteByte('.')
		i += int(q[i]) + 1
	}
	if i += 5; i > len(q) { // the root label, QTYPE, QCLASS
		return nil
	}
	r := slices.Clone(q[:i])
	r[2] = 0x80 | q[2]&0x79 // QR; the query's opcode and RD
	clear(r[6:12])          // no answer, authority or additional records (yet)
	ip := c.lookup(name.String())
	switch qtype := binary.BigEndian.Uint16(q[i-4 : i-2]); {
	case ip == nil:
		r[3] = 0x80 | 3 // RA; NXDOMAIN
	case qtype == 1: // A: a pointer to the question's name, type A, class IN, TTL 0, 4 bytes of address
		r[3] = 0x80
		binary.BigEndian.PutUint16(r[6:8], 1)
		r = append(r, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4)
		r = append(r, ip...)
	default: // the name exists, with no record of this type
		r[3] = 0x80
	}
	return r
}

// lines are the lines of s that satisfy match.
func lines(s string, match func(string) bool) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if match(l) {
			out = append(out, l)
		}
	}
	return out
}

// TestPodsHarness: a pod is what the pod tests take it for. A process in it has the pod's hostname and exactly the
// pod's environment; a pod's DNS name (and its own hostname) resolves to that pod's address; a name the cluster
// does not know is "no such host" (the cluster DNS's NXDOMAIN) until the cluster DNS publishes it, as kube-dns
// does once the headless service has the pod; and none of it reaches the machine, whose hostname and /etc/hosts stay as they were.
func TestPodsHarness(t *testing.T) {
	t.Parallel()
	hostname, err := os.Hostname()
	mustDo(t, err)
	etcHosts, err := os.ReadFile("/etc/hosts")
	mustDo(t, err)
	c := newCluster(t, jobset{name: "look", rjob: "tpu", accel: "v4-16"})
	p0, p1 := c.pods[0], c.pods[1]
	p1.unlist(p0)
	unknown := "nobody." + p1.spec.Subdomain
	v := p1.look(p0.dns, p1.dns, p1.hostname, unknown)
	if v.Hostname != p1.hostname || !slices.Equal(v.Env, p1.env) {
		t.Errorf("in pod %s: hostname %q, env\n%s\nwant the pod's:\n%s", p1.hostname, v.Hostname, strings.Join(v.Env, "\n"),
			strings.Join(p1.env, "\n"))
	}
	for _, name := range []string{p1.dns, p1.hostname} {
		if got := v.Hosts[name]; !slices.Equal(got, []string{p1.addr}) {
			t.Errorf("in pod %s: %s resolves to %v, want %s", p1.hostname, name, got, p1.addr)
		}
	}
	for _, name := range []string{p0.dns, unknown} {
		if !v.NotFound[name] {
			t.Errorf("in pod %s: %s resolves to %v (not found: %v), want no such host", p1.hostname, name, v.Hosts[name], v.NotFound[name])
		}
	}
	c.publish(p0)
	if v := p1.look(p0.dns, unknown); !slices.Equal(v.Hosts[p0.dns], []string{p0.addr}) || !v.NotFound[unknown] {
		t.Errorf("in pod %s, once the cluster DNS publishes %s: it resolves to %v, want %s; %s not found: %v, want true",
			p1.hostname, p0.dns, v.Hosts[p0.dns], p0.addr, unknown, v.NotFound[unknown])
	}
	h, err := os.Hostname()
	mustDo(t, err)
	b, err := os.ReadFile("/etc/hosts")
	mustDo(t, err)
	if h != hostname || string(b) != string(etcHosts) {
		t.Errorf("the machine's hostname %q and /etc/hosts changed (were %q):\n%s", h, hostname, b)
	}
}
