package k8stest

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// What the Job controller (kubernetes pkg/controller/job) gives each pod of an Indexed Job: the completion index
// as an annotation and a label (PodIndexLabel, on by default since 1.28), the Job's name as labels, the hostname
// <job name>-<index> (job_controller.go, manageJob), and a JOB_COMPLETION_INDEX env var appended to every
// container that lacks one, a downward-API reference to that label (indexed_job_utils.go,
// addCompletionIndexEnvVariable).
const (
	JobCompletionIndexKey = batchv1.JobCompletionIndexAnnotation // batch.kubernetes.io/job-completion-index
	JobNameLabel          = batchv1.JobNameLabel                 // batch.kubernetes.io/job-name
	LegacyJobNameLabel    = "job-name"                           // the same, as older clusters name it
	EnvJobCompletionIndex = "JOB_COMPLETION_INDEX"
)

// FakeUID is the JobSet's metadata.uid that Pods uses when Cluster.UID is empty (the API server gives a real one).
const FakeUID = "3f2a6c1e-8d4b-4f0a-9c7e-2b5d1a0e9f31"

// Cluster is what a manifest does not say and the cluster decides.
type Cluster struct {
	// UID is the JobSet's metadata.uid, the jobset.sigs.k8s.io/jobset-uid label; empty: FakeUID.
	UID string
	// RestartAttempt is jobset.status.restarts when the Jobs were made: how often the JobSet was restarted (every
	// Job recreated) before; the jobset.sigs.k8s.io/restart-attempt label.
	RestartAttempt int32
	// Namespace the JobSet runs in; empty: the JobSet's metadata.namespace, else "default".
	Namespace string
	// Secrets are the namespace's Secrets a secretKeyRef reads: Secret name -> key -> value.
	Secrets map[string]map[string]string
	// ImageEnv is the environment of the container's image ("KEY=VALUE": its config's Env, what its Dockerfile's
	// ENV lines set, PATH among them), which the pod's own variables replace name by name.
	ImageEnv []string
}

// Pod is one pod a JobSet makes, as its container sees it.
type Pod struct {
	Name          string // metadata.name: <hostname>-<5 characters>, as the Job controller's generateName (fixed here)
	Namespace     string
	Hostname      string // <jobset>-<replicatedJob>-<JobIndex>-<PodIndex>: spec.hostname, what `hostname` prints
	Subdomain     string // spec.subdomain: the headless Service JobSet makes (network.subdomain, default the JobSet's name); "" with enableDNSHostnames false
	DNSName       string // <Hostname>.<Subdomain>, what the other pods resolve; "" without a subdomain
	ReplicatedJob string // the replicatedJob's name
	JobName       string // <jobset>-<replicatedJob>-<JobIndex>
	// JobIndex is the Job's index in its replicatedJob (jobset.sigs.k8s.io/job-index); JobGlobalIndex its index
	// over the whole JobSet (job-global-index). In a multislice JobSet (one replicatedJob, replicas = slices) both
	// are the slice.
	JobIndex, JobGlobalIndex int
	// PodIndex is the pod's completion index in its Job: TPU_WORKER_ID, JOB_COMPLETION_INDEX.
	PodIndex    int
	Labels      map[string]string // the template's, JobSet's (jobset.sigs.k8s.io/...) and the Job controller's
	Annotations map[string]string
	// Spec is the pod's spec: the template with JobSet's defaults, the subdomain, the hostname, and the env the
	// Job controller and GKE's webhook append.
	Spec corev1.PodSpec
	// Container is the name of the container described by Env and Argv: the one that requests google.com/tpu,
	// else the first.
	Container string
	// TPU is the slice the container runs on (nil without google.com/tpu).
	TPU *TPU
	// Env is the whole environment of the container's process, "KEY=VALUE", each name once, a later definition of
	// a name replacing an earlier one: the image's (Cluster.ImageEnv), the container runtime's HOSTNAME (the
	// pod's hostname), then what the kubelet gives the runtime: the TPU device plugin's variables, the container's
	// env in order (the manifest's, JOB_COMPLETION_INDEX, the webhook's) with the downward API, Secrets and $(VAR)
	// resolved as the kubelet does, and the kubelet's variables of the cluster's kubernetes Service
	// (KubernetesServiceEnv); last HOME, which runc sets to the user's home directory where nothing else set it
	// (/root: the images of these pods run as root).
	Env []string
	// Argv is the container's command and args, $(VAR) expanded as the kubelet does, against what the kubelet
	// gives the runtime (not the image's variables, nor HOSTNAME or HOME).
	Argv []string
}

// LookupEnv is the value of the container's env var key, and whether it is set.
func (p *Pod) LookupEnv(key string) (string, bool) {
	for _, kv := range p.Env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v, true
		}
	}
	return "", false
}

// Getenv is the value of the container's env var key ("" when unset).
func (p *Pod) Getenv(key string) string {
	v, _ := p.LookupEnv(key)
	return v
}

// EnvMap is the container's environment as a map.
func (p *Pod) EnvMap() map[string]string {
	m := make(map[string]string, len(p.Env))
	for _, kv := range p.Env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// Subdomain is the subdomain of the JobSet's pods and the name of its headless Service: network.subdomain, else
// the JobSet's name (GetSubdomain); "" when DNS hostnames are off. JobSet's webhook defaults
// network.enableDNSHostnames to true.
func Subdomain(js *JobSet) string {
	n := js.Spec.Network
	if n != nil && n.EnableDNSHostnames != nil && !*n.EnableDNSHostnames {
		return ""
	}
	if n != nil && n.Subdomain != "" {
		return n.Subdomain
	}
	return js.Name
}

// CoordinatorEndpoint is the jobset.sigs.k8s.io/coordinator value: <js>-<rjob>-<jobIndex>-<podIndex>.<subdomain>
// of spec.coordinator (CoordinatorEndpoint in JobSet's controller); "" without spec.coordinator.
func CoordinatorEndpoint(js *JobSet) string {
	c := js.Spec.Coordinator
	if c == nil {
		return ""
	}
	sub := js.Name
	if js.Spec.Network != nil && js.Spec.Network.Subdomain != "" {
		sub = js.Spec.Network.Subdomain
	}
	return fmt.Sprintf("%s-%s-%d-%d.%s", js.Name, c.ReplicatedJob, c.JobIndex, c.PodIndex, sub)
}

// Pods lists the pods js makes, in order: replicatedJobs as listed, their Jobs by index, each Job's pods by
// completion index. Each pod is what JobSet's controller (labelAndAnnotateObject, constructJob, with its webhook's
// defaults), the Job controller, GKE's TPU webhook and device plugin, and the kubelet make of the template (see
// Pod). It fails on what it cannot tell: a replicatedJob of replicas 0 or none written (the CRD default of 1
// cannot be told from 0 here), a NonIndexed Job, an Indexed Job without completions, a TPU Job whose parallelism
// is not its completions, an env source or field it does not know, a Secret or key not in c.Secrets, a hostname
// longer than a DNS label, a label value JobSet would make longer than 63 characters (the coordinator's, of long
// names).
func Pods(js *JobSet, c Cluster) ([]Pod, error) {
	if c.UID == "" {
		c.UID = FakeUID
	}
	if c.Namespace == "" {
		c.Namespace = js.Namespace
	}
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	var out []Pod
	global := 0
	for i := range js.Spec.ReplicatedJobs {
		rjob := &js.Spec.ReplicatedJobs[i]
		if rjob.Replicas < 1 {
			return nil, fmt.Errorf("replicatedJob %q: replicas %d: write replicas (1 or more)", rjob.Name, rjob.Replicas)
		}
		for j := 0; j < int(rjob.Replicas); j++ {
			pods, err := jobPods(js, rjob, j, global+j, c)
			if err != nil {
				return nil, fmt.Errorf("replicatedJob %q job %d: %w", rjob.Name, j, err)
			}
			out = append(out, pods...)
		}
		global += int(rjob.Replicas)
	}
	return out, nil
}

// jobSetLabels are the labels (and, with the same values, annotations) JobSet's labelAndAnnotateObject puts on
// the Job jobIdx of rjob and its pods.
func jobSetLabels(js *JobSet, rjob *ReplicatedJob, jobIdx, globalIdx int, c Cluster) map[string]string {
	group := groupName(rjob)
	globalReplicas, groupReplicas, groupIdx := 0, 0, 0
	for k := range js.Spec.ReplicatedJobs {
		r := &js.Spec.ReplicatedJobs[k]
		globalReplicas += int(r.Replicas)
		if groupName(r) != group {
			continue
		}
		if r == rjob {
			groupIdx = groupReplicas + jobIdx
		}
		groupReplicas += int(r.Replicas)
	}
	jobName := fmt.Sprintf("%s-%s-%d", js.Name, rjob.Name, jobIdx)
	key := sha1.Sum([]byte(c.Namespace + "/" + jobName))
	l := map[string]string{
		JobSetNameKey:         js.Name,
		JobSetUIDKey:          c.UID,
		ReplicatedJobNameKey:  rjob.Name,
		RestartsKey:           strconv.Itoa(int(c.RestartAttempt)),
		ReplicatedJobReplicas: strconv.Itoa(int(rjob.Replicas)),
		GlobalReplicasKey:     strconv.Itoa(globalReplicas),
		JobIndexKey:           strconv.Itoa(jobIdx),
		JobKey:                hex.EncodeToString(key[:]),
		JobGlobalIndexKey:     strconv.Itoa(globalIdx),
		GroupNameKey:          group,
		GroupReplicasKey:      strconv.Itoa(groupReplicas),
		JobGroupIndexKey:      strconv.Itoa(groupIdx),
	}
	if ep := CoordinatorEndpoint(js); ep != "" {
		l[CoordinatorKey] = ep
	}
	return l
}

// groupName is the replicatedJob's groupName, "default" when none is written (the CRD's default).
func groupName(r *ReplicatedJob) string {
	if r.GroupName == "" {
		return "default"
	}
	return r.GroupName
}

// jobPods are the pods of Job jobIdx of rjob.
func jobPods(js *JobSet, rjob *ReplicatedJob, jobIdx, globalIdx int, c Cluster) ([]Pod, error) {
	spec := &rjob.Template.Spec
	if spec.CompletionMode != nil && *spec.CompletionMode != batchv1.IndexedCompletion {
		return nil, fmt.Errorf("completionMode %s: k8stest models Indexed Jobs (JobSet's default)", *spec.CompletionMode)
	}
	if spec.Completions == nil {
		return nil, fmt.Errorf("an Indexed Job needs completions")
	}
	completions, parallelism := int(*spec.Completions), 1
	if spec.Parallelism != nil {
		parallelism = int(*spec.Parallelism)
	}
	jobName := fmt.Sprintf("%s-%s-%d", js.Name, rjob.Name, jobIdx)
	setLabels := jobSetLabels(js, rjob, jobIdx, globalIdx, c)
	for k, v := range setLabels {
		if len(v) > 63 { // a label value is at most 63 characters: the API server refuses the Job
			return nil, fmt.Errorf("JobSet's label %s=%q is longer than a label value may be (63)", k, v)
		}
	}
	var out []Pod
	for idx := 0; idx < completions; idx++ {
		p := Pod{Namespace: c.Namespace, ReplicatedJob: rjob.Name, JobName: jobName, JobIndex: jobIdx,
			JobGlobalIndex: globalIdx, PodIndex: idx, Hostname: fmt.Sprintf("%s-%d", jobName, idx), Subdomain: Subdomain(js)}
		if len(p.Hostname) > 63 {
			return nil, fmt.Errorf("hostname %q is longer than a DNS label (63)", p.Hostname)
		}
		if p.Subdomain != "" {
			p.DNSName = p.Hostname + "." + p.Subdomain
		}
		p.Name = p.Hostname + "-" + fakeSuffix(c.Namespace+"/"+p.Hostname)
		p.Labels, p.Annotations = podMeta(&rjob.Template.Spec.Template.ObjectMeta, setLabels, jobName, idx)
		if err := p.build(&spec.Template.Spec, parallelism, completions, c); err != nil {
			return nil, fmt.Errorf("pod %d: %w", idx, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// podMeta is a pod's labels and annotations: the template's, then JobSet's (as labels and annotations), then the
// Job controller's.
func podMeta(tmpl interface {
	GetLabels() map[string]string
	GetAnnotations() map[string]string
}, setLabels map[string]string, jobName string, idx int) (labels, annotations map[string]string) {
	labels, annotations = map[string]string{}, map[string]string{}
	maps.Copy(labels, tmpl.GetLabels())
	maps.Copy(annotations, tmpl.GetAnnotations())
	maps.Copy(labels, setLabels)
	maps.Copy(annotations, setLabels)
	labels[JobNameLabel], labels[LegacyJobNameLabel] = jobName, jobName
	labels[JobCompletionIndexKey] = strconv.Itoa(idx)
	annotations[JobCompletionIndexKey] = strconv.Itoa(idx)
	return labels, annotations
}

// build makes p's spec from the template (JobSet's defaults, subdomain and hostname, the Job controller's and the
// webhook's env) and resolves its container's environment and argv.
func (p *Pod) build(tmpl *corev1.PodSpec, parallelism, completions int, c Cluster) error {
	spec := tmpl.DeepCopy()
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = corev1.RestartPolicyOnFailure // JobSet's webhook default
	}
	if p.Subdomain != "" {
		spec.Subdomain = p.Subdomain
	}
	spec.Hostname = p.Hostname
	ctr, err := workload(spec)
	if err != nil {
		return err
	}
	for i := range spec.Containers {
		appendMissing(&spec.Containers[i], corev1.EnvVar{Name: EnvJobCompletionIndex, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: fmt.Sprintf("metadata.labels['%s']", JobCompletionIndexKey)}}})
	}
	tpu, err := TPUOf(spec, ctr)
	if err != nil {
		return err
	}
	if tpu != nil && spec.Subdomain != "" && parallelism > 1 {
		if parallelism != completions {
			return fmt.Errorf("TPU Job with parallelism %d and completions %d: GKE's TPU webhook is modelled for parallelism = completions", parallelism, completions)
		}
		for _, e := range WebhookEnv(p.JobName, spec.Subdomain, completions) {
			appendMissing(ctr, e)
		}
	}
	p.Spec, p.Container, p.TPU = *spec, ctr.Name, tpu
	return p.resolve(ctr, c)
}

// workload is the container Pod describes: the first that requests google.com/tpu, else the first.
func workload(spec *corev1.PodSpec) (*corev1.Container, error) {
	if len(spec.Containers) == 0 {
		return nil, fmt.Errorf("the pod template has no container")
	}
	for i := range spec.Containers {
		if RequestedTPUs(&spec.Containers[i]) > 0 {
			return &spec.Containers[i], nil
		}
	}
	return &spec.Containers[0], nil
}

// resolve sets p.Env (see Pod) and p.Argv.
func (p *Pod) resolve(ctr *corev1.Container, c Cluster) error {
	kubelet := &orderedEnv{} // what the kubelet gives the container runtime
	if p.TPU != nil {
		for _, kv := range DeviceEnv(p.TPU) {
			kubelet.set(kv[0], kv[1])
		}
	}
	if err := p.resolveEnv(ctr, kubelet, c); err != nil {
		return fmt.Errorf("container %q: %w", ctr.Name, err)
	}
	for _, kv := range KubernetesServiceEnv() {
		if _, ok := kubelet.lookup(kv[0]); !ok {
			kubelet.set(kv[0], kv[1])
		}
	}
	for _, a := range append(append([]string(nil), ctr.Command...), ctr.Args...) {
		p.Argv = append(p.Argv, Expand(a, kubelet.lookup))
	}
	env := &orderedEnv{}
	for _, kv := range c.ImageEnv {
		k, v, _ := strings.Cut(kv, "=")
		env.set(k, v)
	}
	env.set("HOSTNAME", p.Hostname)
	for _, k := range kubelet.names {
		env.set(k, kubelet.values[k])
	}
	if _, ok := env.lookup("HOME"); !ok {
		env.set("HOME", "/root")
	}
	p.Env = env.list()
	return nil
}

// appendMissing appends e to the container's env unless a variable of that name is there (the Job controller's
// rule for JOB_COMPLETION_INDEX; taken for the webhook's too).
func appendMissing(c *corev1.Container, e corev1.EnvVar) {
	for _, v := range c.Env {
		if v.Name == e.Name {
			return
		}
	}
	c.Env = append(c.Env, e)
}

// fakeSuffix is a stable stand-in for the 5 random characters of a generated name (from apiserver's alphabet).
func fakeSuffix(s string) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	h := sha1.Sum([]byte(s))
	b := make([]byte, 5)
	for i := range b {
		b[i] = alphabet[int(h[i])%len(alphabet)]
	}
	return string(b)
}
