// Package kubernetes_test checks the JobSet manifests of examples/kubernetes against JobSet's published v1alpha2
// API and k8s.io/api (strictly: a misspelled field fails), and against what tpurun reads in each pod
// (/work/wt/SPEC-36.md, issue 36): the pods are listed with k8stest.Pods and their environment resolved as the
// kubelet, the Job controller, JobSet and GKE's TPU webhook and device plugin make it.
package kubernetes_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"tpurun/internal/testutil/k8stest"
)

// manifest is what a JobSet file of this directory must be.
type manifest struct {
	file            string
	slices, hosts   int    // Jobs of the replicatedJob; pods per Job (the TPU type's hosts)
	acceleratorType string // TPU_ACCELERATOR_TYPE the device plugin derives from the nodeSelector
}

var manifests = []manifest{
	{"jobset-slice.yaml", 1, 4, "v5litepod-16"},
	{"jobset-multislice.yaml", 2, 4, "v6e-16"},
}

// The Secret the README tells users to create, as a test's cluster holds it.
var secrets = map[string]map[string]string{"tpurun-rdzv": {"token": "test-token"}}

// specCommand is the command SPEC-36 gives every pod: tpurun with no flags, discovery does the rest.
var specCommand = []string{"tpurun", "--", "python3", "/app/examples/train.py"}

// The pod env tpurun reads (SPEC-36 section 1), and the JobSet labels or annotations a manifest may map it from
// through the downward API. With one replicatedJob, global-replicas and replicatedjob-replicas are the same
// number, and so are job-global-index and job-index (xpk maps the latter); the resolved values are checked too.
var downward = map[string][]string{
	"JOBSET_NAME":            {k8stest.JobSetNameKey},
	"JOBSET_UID":             {k8stest.JobSetUIDKey},
	"JOBSET_RESTART_ATTEMPT": {k8stest.RestartsKey},
}

var multisliceDownward = map[string][]string{
	"MEGASCALE_NUM_SLICES":          {k8stest.GlobalReplicasKey, k8stest.ReplicatedJobReplicas},
	"MEGASCALE_SLICE_ID":            {k8stest.JobGlobalIndexKey, k8stest.JobIndexKey},
	"MEGASCALE_COORDINATOR_ADDRESS": {k8stest.CoordinatorKey},
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decode(t *testing.T, file string) *k8stest.JobSet {
	t.Helper()
	js, err := k8stest.DecodeJobSet(read(t, file))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return js
}

// TestEveryManifestDecodesStrictly: every YAML file here decodes, each document into its API type with no field
// that type lacks, and the files holding a JobSet are exactly the ones the other tests check.
func TestEveryManifestDecodesStrictly(t *testing.T) {
	files, err := filepath.Glob("*.y*ml")
	if err != nil {
		t.Fatal(err)
	}
	var withJobSet []string
	for _, f := range files {
		objs, err := k8stest.DecodeManifests(read(t, f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		n := 0
		for _, o := range objs {
			if _, ok := o.(*k8stest.JobSet); ok {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d JobSets, want 1", f, n)
		}
		withJobSet = append(withJobSet, f)
	}
	var want []string
	for _, m := range manifests {
		want = append(want, m.file)
	}
	slices.Sort(want)
	if !slices.Equal(withJobSet, want) {
		t.Errorf("JobSet manifests here: %q; the tests check %q", withJobSet, want)
	}
}

// trainContainer is the replicatedJob's Job template and its container that requests the TPU chips.
func trainContainer(t *testing.T, js *k8stest.JobSet) (*batchv1.JobSpec, *corev1.Container) {
	t.Helper()
	if len(js.Spec.ReplicatedJobs) != 1 {
		t.Fatalf("%d replicatedJobs, want 1 (one Job per slice)", len(js.Spec.ReplicatedJobs))
	}
	job := &js.Spec.ReplicatedJobs[0].Template.Spec
	for i := range job.Template.Spec.Containers {
		if c := &job.Template.Spec.Containers[i]; k8stest.RequestedTPUs(c) > 0 {
			return job, c
		}
	}
	t.Fatalf("no container requests %s", k8stest.TPUResource)
	return nil, nil
}

// TestManifestShape: the fields tpurun relies on are written out, not left to defaults that could change.
func TestManifestShape(t *testing.T) {
	for _, m := range manifests {
		t.Run(m.file, func(t *testing.T) {
			js := decode(t, m.file)
			job, ctr := trainContainer(t, js)
			checkJobs(t, m, js, job, ctr)
			checkJobSetPolicies(t, js, job)
			checkEnvSources(t, m, js, ctr)
		})
	}
}

// checkJobs: one Indexed Job per slice, one pod per host of the slice the nodeSelector names, each declaring the
// rendezvous port.
func checkJobs(t *testing.T, m manifest, js *k8stest.JobSet, job *batchv1.JobSpec, ctr *corev1.Container) {
	t.Helper()
	if r := js.Spec.ReplicatedJobs[0].Replicas; int(r) != m.slices {
		t.Errorf("replicas %d, want %d (slices)", r, m.slices)
	}
	if job.CompletionMode == nil || *job.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("completionMode %v, want Indexed (the TPU webhook's TPU_WORKER_ID is the completion index)", job.CompletionMode)
	}
	tpu, err := k8stest.TPUOf(&job.Template.Spec, ctr)
	if err != nil {
		t.Fatal(err)
	}
	if tpu.AcceleratorType != m.acceleratorType || tpu.Hosts != m.hosts {
		t.Errorf("nodeSelector and %s make %s of %d hosts, want %s of %d", k8stest.TPUResource, tpu.AcceleratorType, tpu.Hosts, m.acceleratorType, m.hosts)
	}
	if job.Parallelism == nil || job.Completions == nil || int(*job.Parallelism) != tpu.Hosts || int(*job.Completions) != tpu.Hosts {
		t.Errorf("parallelism %v completions %v, want both %d: one pod per host of %s", deref(job.Parallelism), deref(job.Completions), tpu.Hosts, tpu.AcceleratorType)
	}
	if !slices.ContainsFunc(ctr.Ports, func(p corev1.ContainerPort) bool {
		return p.ContainerPort == 29400 && (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) && p.Name != ""
	}) {
		t.Errorf("ports %+v: want the rendezvous port 29400/TCP declared, named", ctr.Ports)
	}
}

// checkJobSetPolicies: a failed pod restarts the whole JobSet (a new attempt), and pods have DNS names at once.
func checkJobSetPolicies(t *testing.T, js *k8stest.JobSet, job *batchv1.JobSpec) {
	t.Helper()
	if job.BackoffLimit == nil || *job.BackoffLimit != 0 {
		t.Errorf("backoffLimit %v, want 0: a failed pod fails its Job and JobSet restarts every pod (a new restart attempt, a new run id), instead of the Job recreating one pod into the old attempt", deref(job.BackoffLimit))
	}
	if rp := job.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q, want Never", rp)
	}
	if fp := js.Spec.FailurePolicy; fp == nil || fp.MaxRestarts < 1 {
		t.Errorf("failurePolicy %+v, want maxRestarts of 1 or more", fp)
	}
	if n := js.Spec.Network; n == nil || n.EnableDNSHostnames == nil || !*n.EnableDNSHostnames || n.PublishNotReadyAddresses == nil || !*n.PublishNotReadyAddresses {
		t.Errorf("network %+v, want enableDNSHostnames and publishNotReadyAddresses true", n)
	}
}

// checkEnvSources: the token from a Secret, the run id's parts (and a multislice job's MEGASCALE_*) through the
// downward API, the coordinator slice 0's first pod; a single slice sets no MEGASCALE_*.
func checkEnvSources(t *testing.T, m manifest, js *k8stest.JobSet, ctr *corev1.Container) {
	t.Helper()
	env := map[string]corev1.EnvVar{}
	for _, e := range ctr.Env {
		env[e.Name] = e
	}
	if tok := env["TPURUN_RDZV_TOKEN"]; tok.Value != "" || tok.ValueFrom == nil || tok.ValueFrom.SecretKeyRef == nil {
		t.Errorf("TPURUN_RDZV_TOKEN %+v: want it from a secretKeyRef, never written in the manifest", tok)
	}
	want := downward
	if m.slices > 1 {
		want = mergeMaps(downward, multisliceDownward)
		c := js.Spec.Coordinator
		if c == nil || c.ReplicatedJob != js.Spec.ReplicatedJobs[0].Name || c.JobIndex != 0 || c.PodIndex != 0 {
			t.Errorf("coordinator %+v, want slice 0's first pod", c)
		}
	}
	for name, keys := range want {
		checkDownward(t, env[name], name, keys)
	}
	for name := range multisliceDownward {
		if _, ok := env[name]; ok && m.slices == 1 {
			t.Errorf("%s is set in a single-slice JobSet", name)
		}
	}
}

// checkDownward: env var name comes through the downward API from one of JobSet's label or annotation keys.
func checkDownward(t *testing.T, e corev1.EnvVar, name string, keys []string) {
	t.Helper()
	if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
		t.Errorf("%s %+v: want a fieldRef on the label or annotation %q", name, e, keys)
		return
	}
	p := e.ValueFrom.FieldRef.FieldPath
	for _, key := range keys {
		if p == fmt.Sprintf("metadata.annotations['%s']", key) || p == fmt.Sprintf("metadata.labels['%s']", key) {
			return
		}
	}
	t.Errorf("%s: fieldPath %q, want the label or annotation %q", name, p, keys)
}

func mergeMaps(a, b map[string][]string) map[string][]string {
	out := map[string][]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestPodsSeeOneWorld: every pod of every manifest, at two restart attempts, resolves what tpurun reads to
// SPEC-36's world: the run id's parts (the same on every pod of an attempt, another after a restart), the token,
// the slice's hosts and this pod's index in them, and in a multislice job the slices, this pod's slice and the
// coordinator (slice 0's first pod, the same on every pod), so that node ranks slice x hosts + worker id number
// every pod once.
func TestPodsSeeOneWorld(t *testing.T) {
	for _, m := range manifests {
		t.Run(m.file, func(t *testing.T) {
			js := decode(t, m.file)
			runIDs := map[string]bool{}
			for _, attempt := range []int32{0, 1} {
				pods, err := k8stest.Pods(js, k8stest.Cluster{UID: k8stest.FakeUID, RestartAttempt: attempt, Secrets: secrets})
				if err != nil {
					t.Fatal(err)
				}
				if len(pods) != m.slices*m.hosts {
					t.Fatalf("%d pods, want %d slices x %d hosts", len(pods), m.slices, m.hosts)
				}
				ids := map[string]bool{}
				for i := range pods {
					p := &pods[i]
					ids[p.Getenv("JOBSET_UID")+"-"+p.Getenv("JOBSET_RESTART_ATTEMPT")] = true
					checkPod(t, m, js, pods, p, attempt)
				}
				if len(ids) != 1 {
					t.Errorf("attempt %d: run ids %v, want one for every pod", attempt, ids)
				}
				for id := range ids {
					if runIDs[id] {
						t.Errorf("attempt %d: run id %q is the previous attempt's", attempt, id)
					}
					runIDs[id] = true
				}
				checkRanks(t, m, pods)
			}
		})
	}
}

// checkPod checks one pod's resolved env against the world its JobSet makes.
func checkPod(t *testing.T, m manifest, js *k8stest.JobSet, pods []k8stest.Pod, p *k8stest.Pod, attempt int32) {
	t.Helper()
	var slice []string // this Job's pods, by completion index
	for _, q := range pods {
		if q.JobGlobalIndex == p.JobGlobalIndex {
			slice = append(slice, q.DNSName)
		}
	}
	want := map[string]string{
		"JOBSET_NAME":            js.Name,
		"JOBSET_UID":             k8stest.FakeUID,
		"JOBSET_RESTART_ATTEMPT": strconv.Itoa(int(attempt)),
		"TPURUN_RDZV_TOKEN":      "test-token",
		"TPU_WORKER_ID":          strconv.Itoa(p.PodIndex),
		"TPU_WORKER_HOSTNAMES":   strings.Join(slice, ","),
		"TPU_ACCELERATOR_TYPE":   m.acceleratorType,
		"TPU_SKIP_MDS_QUERY":     "true",
	}
	if m.slices > 1 {
		want["MEGASCALE_NUM_SLICES"] = strconv.Itoa(m.slices)
		want["MEGASCALE_SLICE_ID"] = strconv.Itoa(p.JobGlobalIndex)
		want["MEGASCALE_COORDINATOR_ADDRESS"] = pods[0].DNSName // slice 0, pod 0
	}
	for k, v := range want {
		if got, ok := p.LookupEnv(k); !ok || got != v {
			t.Errorf("attempt %d, pod %s: %s = %q (set %v), want %q", attempt, p.Hostname, k, got, ok, v)
		}
	}
	if pods[0].JobGlobalIndex != 0 || pods[0].PodIndex != 0 || pods[0].DNSName != fmt.Sprintf("%s-%s-0-0.%s", js.Name, pods[0].ReplicatedJob, js.Name) {
		t.Errorf("the first pod is %s (slice %d, index %d), want slice 0's first pod", pods[0].DNSName, pods[0].JobGlobalIndex, pods[0].PodIndex)
	}
	if len(slice) != m.hosts {
		t.Errorf("pod %s: its slice has %d pods, want %d", p.Hostname, len(slice), m.hosts)
	}
	if !slices.Equal(p.Argv, specCommand) {
		t.Errorf("pod %s runs %q, want %q (no flags: discovery does the rest)", p.Hostname, p.Argv, specCommand)
	}
}

// checkRanks: node rank = MEGASCALE_SLICE_ID (0 without it) x len(TPU_WORKER_HOSTNAMES) + TPU_WORKER_ID numbers
// the pods 0 .. slices x hosts - 1, each once, and every pod's rendezvous host (the coordinator's host, else its
// slice's first host) is the same pod, which exists.
func checkRanks(t *testing.T, m manifest, pods []k8stest.Pod) {
	t.Helper()
	seen := map[int]string{}
	endpoints := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		hosts := strings.Split(p.Getenv("TPU_WORKER_HOSTNAMES"), ",")
		id, err1 := strconv.Atoi(p.Getenv("TPU_WORKER_ID"))
		sliceID, err2 := strconv.Atoi(orDefault(p.Getenv("MEGASCALE_SLICE_ID"), "0"))
		if err1 != nil || err2 != nil || id >= len(hosts) {
			t.Errorf("pod %s: TPU_WORKER_ID %q MEGASCALE_SLICE_ID %q over %d hosts", p.Hostname, p.Getenv("TPU_WORKER_ID"), p.Getenv("MEGASCALE_SLICE_ID"), len(hosts))
			continue
		}
		if hosts[id] != p.DNSName {
			t.Errorf("pod %s: TPU_WORKER_HOSTNAMES[TPU_WORKER_ID] = %q, not its own DNS name %q", p.Hostname, hosts[id], p.DNSName)
		}
		rank := sliceID*len(hosts) + id
		if other, dup := seen[rank]; dup {
			t.Errorf("node rank %d: pods %s and %s", rank, other, p.Hostname)
		}
		seen[rank] = p.Hostname
		ep := hosts[0]
		if c := p.Getenv("MEGASCALE_COORDINATOR_ADDRESS"); c != "" {
			ep = c
		}
		endpoints[ep] = true
	}
	for r := 0; r < m.slices*m.hosts; r++ {
		if _, ok := seen[r]; !ok {
			t.Errorf("no pod has node rank %d", r)
		}
	}
	if len(endpoints) != 1 || !endpoints[pods[0].DNSName] {
		t.Errorf("rendezvous hosts %v, want %s alone", endpoints, pods[0].DNSName)
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// TestPodCommandIsTheREADMEs: the command every pod runs is the one the README's JobSet section shows (and this
// directory's README), and its program is in the image (examples/Dockerfile copies examples/ to /app/examples).
func TestPodCommandIsTheREADMEs(t *testing.T) {
	readme, err := k8stest.READMEPodCommand(read(t, filepath.Join("..", "..", "README.md")))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(readme, specCommand) {
		t.Errorf("the README documents %q for the pods, SPEC-36 %q", readme, specCommand)
	}
	for _, m := range manifests {
		pods, err := k8stest.Pods(decode(t, m.file), k8stest.Cluster{Secrets: secrets})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			if !slices.Equal(p.Argv, readme) {
				t.Errorf("%s: pod %s runs %q, the README says %q", m.file, p.Hostname, p.Argv, readme)
			}
		}
	}
	if line := strings.Join(readme, " "); !slices.Contains(strings.Split(string(read(t, "README.md")), "\n"), line) {
		t.Errorf("examples/kubernetes/README.md does not show the pods' command %q on a line of its own", line)
	}
	docker := string(read(t, filepath.Join("..", "Dockerfile")))
	if !strings.Contains(docker, "\nCOPY examples/ /app/examples/\n") {
		t.Errorf("examples/Dockerfile does not COPY examples/ /app/examples/: the pods' program %s is not in the image", readme[len(readme)-1])
	}
	prog := strings.TrimPrefix(readme[len(readme)-1], "/app/examples/")
	if _, err := os.Stat(filepath.Join("..", prog)); err != nil {
		t.Errorf("the pods run %s: examples/%s: %v", readme[len(readme)-1], prog, err)
	}
}
