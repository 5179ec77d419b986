package k8stest_test

import (
	"errors"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"tpurun/internal/testutil/k8stest"
)

// tiny is a JobSet of two replicatedJobs: "driver" (one Job of one CPU pod) and "slice" (two Jobs of a two-host
// v4-16 slice each), with env that exercises the downward API, a Secret and $(VAR) expansion.
const tiny = `
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: js
spec:
  coordinator: {replicatedJob: slice, jobIndex: 1}
  network: {subdomain: net}
  replicatedJobs:
  - name: driver
    replicas: 1
    template:
      spec:
        completions: 1
        template:
          spec:
            containers:
            - name: main
              image: img
              command: ["echo", "$(WHO)"]
              env:
              - {name: WHO, value: "driver"}
  - name: slice
    replicas: 2
    groupName: tpu
    template:
      spec:
        parallelism: 2
        completions: 2
        template:
          metadata:
            labels: {app: t}
          spec:
            nodeSelector:
              cloud.google.com/gke-tpu-accelerator: tpu-v4-podslice
              cloud.google.com/gke-tpu-topology: 2x2x2
            containers:
            - name: sidecar
              image: sidecar-img
            - name: train
              image: img
              command: ["run", "--name=$(POD)", "$(TPU_WORKER_ID)", "$$(LITERAL)", "$(UNDEFINED)"]
              args: ["--slice", "$(SLICE)"]
              env:
              - name: SLICE
                valueFrom: {fieldRef: {fieldPath: "metadata.labels['jobset.sigs.k8s.io/job-global-index']"}}
              - name: POD
                valueFrom: {fieldRef: {fieldPath: metadata.name}}
              - name: TOKEN
                valueFrom: {secretKeyRef: {name: s, key: token}}
              - name: MAYBE
                valueFrom: {secretKeyRef: {name: s, key: nothing, optional: true}}
              - {name: EARLY, value: "a $(LATE) b"}
              - {name: LATE, value: "late"}
              - {name: BOTH, value: "$(SLICE)/$(LATE)/$(TPU_ACCELERATOR_TYPE)"}
              - {name: TPU_SKIP_MDS_QUERY, value: "1"}
              resources:
                limits: {google.com/tpu: 4}
`

func tinyPods(t *testing.T) []k8stest.Pod {
	t.Helper()
	js, err := k8stest.DecodeJobSet([]byte(tiny))
	if err != nil {
		t.Fatal(err)
	}
	pods, err := k8stest.Pods(js, k8stest.Cluster{UID: "u-1", RestartAttempt: 2, Secrets: map[string]map[string]string{"s": {"token": "sekrit"}}})
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

func TestPodsNamesAndIndexes(t *testing.T) {
	pods := tinyPods(t)
	var got []string
	for _, p := range pods {
		got = append(got, strings.Join([]string{p.Hostname, p.DNSName, p.JobName, p.ReplicatedJob, itoa(p.JobIndex), itoa(p.JobGlobalIndex), itoa(p.PodIndex), p.Container}, " "))
	}
	want := []string{
		"js-driver-0-0 js-driver-0-0.net js-driver-0 driver 0 0 0 main",
		"js-slice-0-0 js-slice-0-0.net js-slice-0 slice 0 1 0 train",
		"js-slice-0-1 js-slice-0-1.net js-slice-0 slice 0 1 1 train",
		"js-slice-1-0 js-slice-1-0.net js-slice-1 slice 1 2 0 train",
		"js-slice-1-1 js-slice-1-1.net js-slice-1 slice 1 2 1 train",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pods (hostname dns job rjob jobIndex globalIndex podIndex container):\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	p := pods[3]
	if p.Spec.Hostname != p.Hostname || p.Spec.Subdomain != "net" || p.Spec.RestartPolicy != "OnFailure" {
		t.Errorf("spec hostname %q subdomain %q restartPolicy %q, want %q net OnFailure (JobSet's default)", p.Spec.Hostname, p.Spec.Subdomain, p.Spec.RestartPolicy, p.Hostname)
	}
	if !strings.HasPrefix(p.Name, "js-slice-1-0-") || len(p.Name) != len("js-slice-1-0-")+5 {
		t.Errorf("pod name %q, want js-slice-1-0-XXXXX", p.Name)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// tpuPod is a pod spec on a node of accelerator acc and topology topo whose container requests chips.
func tpuPod(acc, topo string, chips int) (*corev1.PodSpec, *corev1.Container) {
	spec := &corev1.PodSpec{
		NodeSelector: map[string]string{k8stest.AcceleratorLabel: acc, k8stest.TopologyLabel: topo},
		Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{k8stest.TPUResource: *resource.NewQuantity(int64(chips), resource.DecimalSI)}}}},
	}
	return spec, &spec.Containers[0]
}

func TestPodsLabels(t *testing.T) {
	p := tinyPods(t)[3] // slice 1 (global index 2), pod 0
	want := map[string]string{
		k8stest.JobSetNameKey:         "js",
		k8stest.JobSetUIDKey:          "u-1",
		k8stest.ReplicatedJobNameKey:  "slice",
		k8stest.ReplicatedJobReplicas: "2",
		k8stest.GlobalReplicasKey:     "3",
		k8stest.JobIndexKey:           "1",
		k8stest.JobGlobalIndexKey:     "2",
		k8stest.RestartsKey:           "2",
		k8stest.GroupNameKey:          "tpu",
		k8stest.GroupReplicasKey:      "2",
		k8stest.JobGroupIndexKey:      "1",
		k8stest.CoordinatorKey:        "js-slice-1-0.net",
		k8stest.JobCompletionIndexKey: "0",
		k8stest.JobNameLabel:          "js-slice-1",
		"app":                         "t",
	}
	for k, v := range want {
		if p.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, p.Labels[k], v)
		}
		if k != "app" && k != k8stest.JobNameLabel && p.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, p.Annotations[k], v)
		}
	}
	if d := tinyPods(t)[0]; d.Labels[k8stest.GroupNameKey] != "default" || d.Labels[k8stest.JobGroupIndexKey] != "0" {
		t.Errorf("driver group %q index %q, want default 0", d.Labels[k8stest.GroupNameKey], d.Labels[k8stest.JobGroupIndexKey])
	}
}

func TestPodsEnv(t *testing.T) {
	pods := tinyPods(t)
	p := pods[4] // slice 1, pod 1
	want := map[string]string{
		"SLICE":                     "2",
		"POD":                       p.Name,
		"TOKEN":                     "sekrit",
		"EARLY":                     "a $(LATE) b", // LATE is defined after EARLY: not expanded, as the kubelet does
		"LATE":                      "late",
		"BOTH":                      "2/late/$(TPU_ACCELERATOR_TYPE)", // the device plugin's env is not the manifest's to expand
		"JOB_COMPLETION_INDEX":      "1",
		"TPU_WORKER_ID":             "1",
		"TPU_WORKER_HOSTNAMES":      "js-slice-1-0.net,js-slice-1-1.net", // this Job's pods only
		"TPU_ACCELERATOR_TYPE":      "v4-16",
		"TPU_TOPOLOGY":              "2x2x2",
		"TPU_SKIP_MDS_QUERY":        "1", // the manifest's value replaces the device plugin's "true"
		"TPU_HOST_BOUNDS":           "1,1,2",
		"HOST_BOUNDS":               "1,1,2",
		"TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
		"CHIPS_PER_HOST_BOUNDS":     "2,2,1",
		"TPU_TOPOLOGY_WRAP":         "false,false,false",
		"TPU_TOPOLOGY_ALT":          "false",
		"TPU_RUNTIME_METRICS_PORTS": "8431,8432,8433,8434",
	}
	for k, v := range want {
		if got, ok := p.LookupEnv(k); !ok || got != v {
			t.Errorf("env %s = %q (set %v), want %q", k, got, ok, v)
		}
	}
	if _, ok := p.LookupEnv("MAYBE"); ok {
		t.Errorf("MAYBE is set from a missing optional secret key; want it unset")
	}
	if _, ok := p.LookupEnv("ENABLE_ICI_RESILIENCY"); ok {
		t.Errorf("ENABLE_ICI_RESILIENCY set on a 2x2x2 slice; only from 4x4x4")
	}
	if n := len(p.Env); n != len(p.EnvMap()) {
		t.Errorf("Env has %d entries but %d names: a name twice", n, len(p.EnvMap()))
	}
	wantArgv := []string{"run", "--name=" + p.Name, "1", "$(LITERAL)", "$(UNDEFINED)", "--slice", "2"}
	if !slices.Equal(p.Argv, wantArgv) {
		t.Errorf("argv %q, want %q", p.Argv, wantArgv)
	}
	if p.TPU == nil || p.TPU.Hosts != 2 || p.TPU.AcceleratorType != "v4-16" {
		t.Errorf("TPU %+v, want a 2-host v4-16", p.TPU)
	}
	d := pods[0]
	if d.TPU != nil || d.Getenv("TPU_WORKER_ID") != "" || d.Getenv("JOB_COMPLETION_INDEX") != "0" {
		t.Errorf("the CPU driver: TPU %v TPU_WORKER_ID %q JOB_COMPLETION_INDEX %q, want no TPU env and index 0", d.TPU, d.Getenv("TPU_WORKER_ID"), d.Getenv("JOB_COMPLETION_INDEX"))
	}
	if !slices.Equal(d.Argv, []string{"echo", "driver"}) {
		t.Errorf("driver argv %q", d.Argv)
	}
}

func TestPodsFailOnWhatTheyCannotTell(t *testing.T) {
	js, err := k8stest.DecodeJobSet([]byte(tiny))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k8stest.Pods(js, k8stest.Cluster{}); err == nil || !strings.Contains(err.Error(), `couldn't find key "token" in Secret default/s`) {
		t.Errorf("Pods without the Secret: %v, want the missing key named", err)
	}
	bad := strings.Replace(tiny, "fieldPath: metadata.name", "fieldPath: spec.nodeName", 1)
	if js, err = k8stest.DecodeJobSet([]byte(bad)); err != nil {
		t.Fatal(err)
	}
	if _, err := k8stest.Pods(js, k8stest.Cluster{Secrets: map[string]map[string]string{"s": {"token": "x"}}}); !errors.Is(err, k8stest.ErrUnsupported) {
		t.Errorf("Pods with fieldRef spec.nodeName: %v, want ErrUnsupported", err)
	}
	bad = strings.Replace(tiny, "name: js\n", "name: a-jobset-whose-name-makes-the-coordinator-label-too-long\n", 1)
	if js, err = k8stest.DecodeJobSet([]byte(bad)); err != nil {
		t.Fatal(err)
	}
	if _, err := k8stest.Pods(js, k8stest.Cluster{Secrets: map[string]map[string]string{"s": {"token": "x"}}}); err == nil || !strings.Contains(err.Error(), k8stest.CoordinatorKey) {
		t.Errorf("Pods with a coordinator label of over 63 characters: %v", err)
	}
	bad = strings.Replace(tiny, "parallelism: 2", "parallelism: 3", 1)
	if js, err = k8stest.DecodeJobSet([]byte(bad)); err != nil {
		t.Fatal(err)
	}
	if _, err := k8stest.Pods(js, k8stest.Cluster{Secrets: map[string]map[string]string{"s": {"token": "x"}}}); err == nil || !strings.Contains(err.Error(), "parallelism 3 and completions 2") {
		t.Errorf("Pods of a TPU Job with parallelism != completions: %v", err)
	}
}

func TestDecodeIsStrict(t *testing.T) {
	for name, edit := range map[string][2]string{
		"misspelled JobSet field":       {"network: {subdomain: net}", "network: {subDomain: net}"},
		"JobSet field of another API":   {"  network:", "  networking: {}\n  network:"},
		"misspelled batch/v1 field":     {"parallelism: 2", "paralelism: 2"},
		"batch/v1 field in wrong case":  {"completions: 1", "Completions: 1"},
		"misspelled core/v1 field":      {"nodeSelector:", "nodeselector:"},
		"duplicate key":                 {"completions: 1", "completions: 1\n        completions: 1"},
		"number where a string goes":    {`value: "driver"`, "value: 7"},
		"wrong kind":                    {"kind: JobSet", "kind: Job"},
		"wrong version":                 {"v1alpha2", "v1alpha1"},
		"status, which no manifest has": {"spec:\n  coordinator", "status: {restarts: 1}\nspec:\n  coordinator"},
	} {
		bad := strings.Replace(tiny, edit[0], edit[1], 1)
		if bad == tiny {
			t.Fatalf("%s: %q is not in the manifest", name, edit[0])
		}
		if _, err := k8stest.DecodeJobSet([]byte(bad)); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

func TestDecodeManifests(t *testing.T) {
	stream := tiny + "\n---\n# a comment alone\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {token: x}\n"
	objs, err := k8stest.DecodeManifests([]byte(stream))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 {
		t.Fatalf("%d objects, want 2", len(objs))
	}
	if _, ok := objs[0].(*k8stest.JobSet); !ok {
		t.Errorf("object 0 is %T, want *JobSet", objs[0])
	}
	if _, err := k8stest.DecodeManifests([]byte(strings.Replace(stream, "stringData", "stringdata", 1))); !errors.Is(err, k8stest.ErrStrict) {
		t.Errorf("a Secret with a misspelled field: %v, want ErrStrict", err)
	}
	if _, err := k8stest.DecodeManifests([]byte("apiVersion: v1\nkind: Pod\n")); err == nil {
		t.Errorf("a kind k8stest does not decode was accepted")
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "a", "B": "$(A)", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	for in, want := range map[string]string{
		"":                "",
		"plain":           "plain",
		"$(A)":            "a",
		"x$(A)y$(A)":      "xaya",
		"$(B)":            "$(A)", // not recursive
		"$(EMPTY)|":       "|",
		"$(MISSING)":      "$(MISSING)",
		"$$(A)":           "$(A)",
		"$$$(A)":          "$a",
		"$$":              "$",
		"$":               "$",
		"a$":              "a$",
		"$A":              "$A",
		"$(A":             "$(A",
		"$($(A))":         "$($(A))", // the name is "$(A", unknown, kept as written
		"$()":             "$()",
		"100$ and $(A)$$": "100$ and a$",
	} {
		if got := k8stest.Expand(in, lookup); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTPUOf(t *testing.T) {
	for _, c := range []struct {
		acc, topo string
		chips     int
		want      string // AcceleratorType hosts hostBounds
	}{
		{"tpu-v4-podslice", "2x2x2", 4, "v4-16 2 1,1,2"},
		{"tpu-v4-podslice", "2x2x1", 4, "v4-8 1 1,1,1"},
		{"tpu-v5-lite-podslice", "4x4", 4, "v5litepod-16 4 2,2,1"},
		{"tpu-v5-lite-podslice", "2x4", 8, "v5litepod-8 1 1,1,1"},
		{"tpu-v5p-slice", "2x2x4", 4, "v5p-32 4 1,1,4"},
		{"tpu-v6e-slice", "4x4", 4, "v6e-16 4 2,2,1"},
		{"tpu-v6e-slice", "16x16", 4, "v6e-256 64 8,8,1"},
		{"tpu7x", "2x2x2", 4, "tpu7x-16 2 1,1,2"},
	} {
		spec, ctr := tpuPod(c.acc, c.topo, c.chips)
		tp, err := k8stest.TPUOf(spec, ctr)
		if err != nil {
			t.Errorf("%s %s: %v", c.acc, c.topo, err)
			continue
		}
		if got := strings.Join([]string{tp.AcceleratorType, itoa(tp.Hosts), tp.HostBounds}, " "); got != c.want {
			t.Errorf("%s %s %d chips: %q, want %q", c.acc, c.topo, c.chips, got, c.want)
		}
	}
	for _, bad := range [][2]string{{"tpu-v4-device", "2x2x1"}, {"nvidia-h100", "2x2"}, {"tpu-v4-podslice", "2x2x2x2"}, {"tpu-v4-podslice", "3x2x2"}} {
		spec, ctr := tpuPod(bad[0], bad[1], 4)
		if _, err := k8stest.TPUOf(spec, ctr); err == nil {
			t.Errorf("TPUOf(%s, %s) accepted", bad[0], bad[1])
		}
	}
}

// TestDeviceEnvWrapAndResilience: the device plugin's per-generation rules for wraparound and ICI resiliency.
func TestDeviceEnvWrapAndResilience(t *testing.T) {
	for _, c := range []struct{ acc, topo, wrap, ici string }{
		{"tpu-v4-podslice", "4x4x4", "true,true,true", "true"},
		{"tpu-v5p-slice", "2x4x4", "false,false,false", ""},
		{"tpu-v6e-slice", "16x16", "true,true,false", ""},
		{"tpu-v5-lite-podslice", "4x8", "false,false,false", ""},
	} {
		spec, ctr := tpuPod(c.acc, c.topo, 4)
		tp, err := k8stest.TPUOf(spec, ctr)
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		for _, kv := range k8stest.DeviceEnv(tp) {
			env[kv[0]] = kv[1]
		}
		if env["TPU_TOPOLOGY_WRAP"] != c.wrap || env["WRAP"] != c.wrap || env["ENABLE_ICI_RESILIENCY"] != c.ici {
			t.Errorf("%s %s: wrap %q ici %q, want %q %q", c.acc, c.topo, env["TPU_TOPOLOGY_WRAP"], env["ENABLE_ICI_RESILIENCY"], c.wrap, c.ici)
		}
	}
	spec, ctr := tpuPod("tpu-v5-lite-podslice", "2x4", 8)
	tp, _ := k8stest.TPUOf(spec, ctr)
	got := map[string]string{}
	for _, kv := range k8stest.DeviceEnv(tp) {
		got[kv[0]] = kv[1]
	}
	if got["TPU_WORKER_ID"] != "0" || got["TPU_WORKER_HOSTNAMES"] != "localhost" {
		t.Errorf("a single-host slice: TPU_WORKER_ID %q TPU_WORKER_HOSTNAMES %q, want 0 localhost (the device plugin's)", got["TPU_WORKER_ID"], got["TPU_WORKER_HOSTNAMES"])
	}
}

// TestTpurunLinksNoKubernetes: only tests and this package import Kubernetes' modules; the tpurun binaries do not.
func TestTpurunLinksNoKubernetes(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "tpurun/cmd/tpurun", "tpurun/cmd/tpurun-bench").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "sigs.k8s.io/") || dep == "tpurun/internal/testutil/k8stest" {
			t.Errorf("the tpurun binaries link %s", dep)
		}
	}
}

// TestPodsProcessEnv: a pod's Env is its process's whole environment: the image's, replaced by the pod's own
// variables; HOSTNAME the pod's hostname; the kubernetes Service's variables, which a manifest's value may expand;
// HOME /root unless set. The argv is expanded against what the kubelet gives, not the image's variables.
func TestPodsProcessEnv(t *testing.T) {
	js, err := k8stest.DecodeJobSet([]byte(tiny))
	if err != nil {
		t.Fatal(err)
	}
	ctr := &js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0]
	ctr.Env = append(ctr.Env, corev1.EnvVar{Name: "API", Value: "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
		corev1.EnvVar{Name: "FROM_IMAGE", Value: "pod"})
	ctr.Command = append(ctr.Command, "$(IMAGE_ONLY)", "$(KUBERNETES_PORT)")
	pods, err := k8stest.Pods(js, k8stest.Cluster{Secrets: map[string]map[string]string{"s": {"token": "x"}},
		ImageEnv: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "FROM_IMAGE=image", "IMAGE_ONLY=1"}})
	if err != nil {
		t.Fatal(err)
	}
	d := pods[0] // the driver, on no TPU
	want := map[string]string{
		"PATH":                    "/usr/local/bin:/usr/bin:/bin",
		"IMAGE_ONLY":              "1",
		"FROM_IMAGE":              "pod",
		"HOSTNAME":                "js-driver-0-0",
		"HOME":                    "/root",
		"KUBERNETES_SERVICE_HOST": k8stest.KubernetesServiceHost,
		"KUBERNETES_SERVICE_PORT": "443",
		"KUBERNETES_PORT":         "tcp://" + k8stest.KubernetesServiceHost + ":443",
		"API":                     "https://" + k8stest.KubernetesServiceHost + ":443",
	}
	for k, v := range want {
		if got, ok := d.LookupEnv(k); !ok || got != v {
			t.Errorf("env %s = %q (set %v), want %q", k, got, ok, v)
		}
	}
	if n := len(d.Env); n != len(d.EnvMap()) {
		t.Errorf("Env has %d entries but %d names: a name twice", n, len(d.EnvMap()))
	}
	if want := []string{"echo", "driver", "$(IMAGE_ONLY)", "tcp://" + k8stest.KubernetesServiceHost + ":443"}; !slices.Equal(d.Argv, want) {
		t.Errorf("argv %q, want %q (the image's variables are the runtime's, not the kubelet's to expand)", d.Argv, want)
	}
	ctr.Env = append(ctr.Env, corev1.EnvVar{Name: "HOME", Value: "/home/me"})
	if pods, err = k8stest.Pods(js, k8stest.Cluster{Secrets: map[string]map[string]string{"s": {"token": "x"}}}); err != nil {
		t.Fatal(err)
	}
	if h := pods[0].Getenv("HOME"); h != "/home/me" {
		t.Errorf("HOME %q with the manifest's HOME=/home/me", h)
	}
}

// TestTPUJobSet: a TPUJobSet is a JobSet that decodes strictly (as a manifest of it would) and makes one pod per
// host of every slice, each with GKE's TPU env for its slice and the env it maps.
func TestTPUJobSet(t *testing.T) {
	js, err := k8stest.TPUJobSet{Name: "t", ReplicatedJob: "slice", Slices: 2, Accelerator: "tpu-v4-podslice", Topology: "2x2x2",
		ChipsPerHost: 4, Command: []string{"run", "--node=$(JOB_COMPLETION_INDEX)"},
		Env: []corev1.EnvVar{k8stest.FromAnnotation("SLICE", k8stest.JobGlobalIndexKey), k8stest.FromAnnotation("COORD", k8stest.CoordinatorKey),
			k8stest.FromSecret("TOKEN", "s", "token")}}.JobSet()
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(js)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k8stest.DecodeJobSet(b); err != nil {
		t.Fatalf("the TPUJobSet as a manifest: %v\n%s", err, b)
	}
	pods, err := k8stest.Pods(js, k8stest.Cluster{Secrets: map[string]map[string]string{"s": {"token": "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pods {
		got = append(got, strings.Join([]string{p.Hostname, p.DNSName, p.Getenv("TPU_WORKER_ID"), p.Getenv("TPU_WORKER_HOSTNAMES"),
			p.Getenv("TPU_ACCELERATOR_TYPE"), p.Getenv("SLICE"), p.Getenv("COORD"), p.Getenv("TOKEN"), strings.Join(p.Argv, " ")}, " "))
	}
	want := []string{
		"t-slice-0-0 t-slice-0-0.t 0 t-slice-0-0.t,t-slice-0-1.t v4-16 0 t-slice-0-0.t x run --node=0",
		"t-slice-0-1 t-slice-0-1.t 1 t-slice-0-0.t,t-slice-0-1.t v4-16 0 t-slice-0-0.t x run --node=1",
		"t-slice-1-0 t-slice-1-0.t 0 t-slice-1-0.t,t-slice-1-1.t v4-16 1 t-slice-0-0.t x run --node=0",
		"t-slice-1-1 t-slice-1-1.t 1 t-slice-1-0.t,t-slice-1-1.t v4-16 1 t-slice-0-0.t x run --node=1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("pods (hostname dns TPU_WORKER_ID TPU_WORKER_HOSTNAMES TPU_ACCELERATOR_TYPE SLICE COORD TOKEN argv):\n%s\nwant:\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := (k8stest.TPUJobSet{Name: "t", ReplicatedJob: "s", Accelerator: "tpu-v4-podslice", Topology: "3x2x2", ChipsPerHost: 4}).JobSet(); err == nil {
		t.Errorf("a TPUJobSet of topology 3x2x2 (no slice GKE knows) was made")
	}
}
