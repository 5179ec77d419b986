package k8stest

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// What GKE gives a TPU pod, in one place. Two sources, each cited at its rules:
//
//   - the TPU device plugin (ai-on-gke/tpu-device-plugin pkg/tpu/util/util.go, InitEnvs and the functions it calls,
//     at commit 4626a9f459c06db8411bce7de0496f59967b7c20): from the node's labels (the pod's nodeSelector names them)
//     and the chips the container requests, for every container that requests google.com/tpu;
//   - GKE's TPU webhook (closed source; its contract is GKE's documentation: "GKE automatically injects these
//     environment variables by using a mutating webhook when a Job is created with the completionMode: Indexed,
//     subdomain, parallelism > 1, and requesting google.com/tpu properties", and /work/shared/TPU_FACTS.md):
//     TPU_WORKER_ID and TPU_WORKER_HOSTNAMES, per Indexed Job.
//
// Left out: VBAR_CONTROL_SERVICE_URL (the node's IP and port 8353: no node here) and TPU_VISIBLE_CHIPS (only for
// privileged containers with device spreading).

// Node labels GKE puts on TPU nodes; a TPU pod selects them in its nodeSelector.
const (
	AcceleratorLabel = "cloud.google.com/gke-tpu-accelerator" // tpu-v4-podslice, tpu-v5-lite-podslice, tpu-v5p-slice, tpu-v6e-slice, tpu7x
	TopologyLabel    = "cloud.google.com/gke-tpu-topology"    // chips per dimension: 2x2x2, 4x4, ...
	// TPUResource is the extended resource a container requests chips with (the device plugin's resource name).
	TPUResource corev1.ResourceName = "google.com/tpu"
)

// The environment GKE injects into a TPU container (names as the device plugin and webhook spell them).
const (
	EnvTPUWorkerID           = "TPU_WORKER_ID"             // webhook: the completion index (device plugin: 0 on one host)
	EnvTPUWorkerHostnames    = "TPU_WORKER_HOSTNAMES"      // webhook: the Job's pods' DNS names (device plugin: localhost)
	EnvTPUAcceleratorType    = "TPU_ACCELERATOR_TYPE"      // <generation>-<cores, or chips for v5litepod and v6e>
	EnvTPUTopology           = "TPU_TOPOLOGY"              // the node's gke-tpu-topology label
	EnvTPUSkipMDSQuery       = "TPU_SKIP_MDS_QUERY"        // "true": read these variables, not the metadata server
	EnvTPURuntimeMetricPorts = "TPU_RUNTIME_METRICS_PORTS" // 8431 and up, one per chip of the node
	EnvTPUHostBounds         = "TPU_HOST_BOUNDS"           // hosts per dimension; HOST_BOUNDS too
	EnvTPUChipsPerHostBounds = "TPU_CHIPS_PER_HOST_BOUNDS" // chips per host per dimension; CHIPS_PER_HOST_BOUNDS too
	EnvTPUTopologyWrap       = "TPU_TOPOLOGY_WRAP"         // torus wraparound per dimension; WRAP too
	EnvTPUTopologyAlt        = "TPU_TOPOLOGY_ALT"          // "false"; ALT too
	EnvEnableICIResiliency   = "ENABLE_ICI_RESILIENCY"     // "true" on v4, v5p, tpu7x slices of 4x4x4 or more
)

// TPU is the slice a pod asks for, as the device plugin derives it from the node labels and the chips requested.
type TPU struct {
	Accelerator        string // the gke-tpu-accelerator label, e.g. tpu-v5-lite-podslice
	Generation         string // v3, v4, v5litepod, v5p, v6e, tpu7x (AcceleratorGen)
	Topology           string // the gke-tpu-topology label, e.g. 4x4
	AcceleratorType    string // TPU_ACCELERATOR_TYPE, e.g. v5litepod-16
	Chips              int    // chips in the slice: the product of the topology
	ChipsPerHost       int    // google.com/tpu of the container (the node's chips on a multi-host slice)
	Hosts              int    // Chips / ChipsPerHost: the product of HostBounds
	HostBounds         string // TPU_HOST_BOUNDS, e.g. 2,2,1
	ChipsPerHostBounds string // TPU_CHIPS_PER_HOST_BOUNDS, e.g. 2,2,1
	Podslice           bool   // a slice node pool (accelerator ends in "slice", or tpu7x): bounds are injected
}

// The device plugin's accelerator label patterns and generations (util.go: acceleratorRegex,
// pastAcceleratorRegex, validTPUGenerations in release order).
var (
	acceleratorRe     = regexp.MustCompile(`^tpu\d+[a-z]?$`)
	pastAcceleratorRe = regexp.MustCompile(`^tpu-v\d+([ep]?[a]?-slice)?((?:-lite)?-(device|podslice))?$`)
	generations       = []string{"v3", "v4", "v5litepod", "v5p", "v6e", "tpu7x"}
)

// generation is the device plugin's AcceleratorGen: tpu-v4-podslice -> v4, tpu-v5-lite-podslice -> v5litepod,
// tpu-v5p-slice -> v5p, tpu-v6e-slice -> v6e, tpu7x -> tpu7x.
func generation(accelerator string) (string, error) {
	if acceleratorRe.MatchString(accelerator) {
		return accelerator, nil
	}
	if !pastAcceleratorRe.MatchString(accelerator) || accelerator == "tpu-v4-device" || accelerator == "tpu-v4-lite-podslice" {
		return "", fmt.Errorf("%s %q is not a TPU accelerator GKE knows", AcceleratorLabel, accelerator)
	}
	v := strings.Split(accelerator, "-")[1]
	if strings.Contains(accelerator, "lite") {
		v += "lite"
	}
	if strings.HasPrefix(v, "v5") && strings.Contains(accelerator, "podslice") {
		v += "pod"
	}
	if !slices.Contains(generations, v) {
		return "", fmt.Errorf("%s %q: TPU generation %q is not one GKE knows", AcceleratorLabel, accelerator, v)
	}
	return v, nil
}

// chipsPerHostDims is getChipsPerDim: the chips of one host along x, y, z.
func chipsPerHostDims(chips int) ([3]int, error) {
	switch chips {
	case 1:
		return [3]int{1, 1, 1}, nil
	case 2:
		return [3]int{1, 2, 1}, nil
	case 4:
		return [3]int{2, 2, 1}, nil
	case 8:
		return [3]int{2, 4, 1}, nil
	}
	return [3]int{}, fmt.Errorf("%s %d per container: GKE knows 1, 2, 4 or 8", TPUResource, chips)
}

// topologyDims is getTopologyDims: "4x4" -> 4,4,1; "2x2x4" -> 2,2,4.
func topologyDims(topology string) ([3]int, error) {
	parts := strings.Split(topology, "x")
	if len(parts) < 2 || len(parts) > 3 {
		return [3]int{}, fmt.Errorf("%s %q is not AxB or AxBxC", TopologyLabel, topology)
	}
	dims := [3]int{1, 1, 1}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return [3]int{}, fmt.Errorf("%s %q is not AxB or AxBxC", TopologyLabel, topology)
		}
		dims[i] = n
	}
	return dims, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// RequestedTPUs is the google.com/tpu a container asks for: its limit, else its request (numTPUsRequested).
func RequestedTPUs(c *corev1.Container) int {
	if q, ok := c.Resources.Limits[TPUResource]; ok && !q.IsZero() {
		return int(q.Value())
	}
	if q, ok := c.Resources.Requests[TPUResource]; ok && !q.IsZero() {
		return int(q.Value())
	}
	return 0
}

// TPUOf describes the slice a pod of spec runs on: from its nodeSelector's accelerator and topology labels and
// the chips its container c requests. It returns nil and no error for a container that requests no TPU.
func TPUOf(spec *corev1.PodSpec, c *corev1.Container) (*TPU, error) {
	chips := RequestedTPUs(c)
	if chips == 0 {
		return nil, nil
	}
	acc, topo := spec.NodeSelector[AcceleratorLabel], spec.NodeSelector[TopologyLabel]
	if acc == "" || topo == "" {
		return nil, fmt.Errorf("container %q requests %s but the nodeSelector lacks %s or %s", c.Name, TPUResource, AcceleratorLabel, TopologyLabel)
	}
	gen, err := generation(acc)
	if err != nil {
		return nil, err
	}
	dims, err := topologyDims(topo)
	if err != nil {
		return nil, err
	}
	per, err := chipsPerHostDims(chips)
	if err != nil {
		return nil, err
	}
	t := &TPU{Accelerator: acc, Generation: gen, Topology: topo, ChipsPerHost: chips, Hosts: 1,
		Podslice: strings.HasSuffix(acc, "slice") || strings.Contains(acc, "tpu7x")}
	t.Chips = dims[0] * dims[1] * dims[2]
	hostBounds := make([]int, 3)
	for i := range dims {
		if dims[i]%per[i] != 0 {
			return nil, fmt.Errorf("topology %s does not divide into hosts of %d chips (%s)", topo, chips, joinInts(per[:]))
		}
		hostBounds[i] = dims[i] / per[i]
		t.Hosts *= hostBounds[i]
	}
	t.HostBounds, t.ChipsPerHostBounds = joinInts(hostBounds), joinInts(per[:])
	// numCores: v5litepod ("lite") and v6e count chips, the others two TensorCores per chip.
	cores := t.Chips * 2
	if strings.Contains(gen, "lite") || gen == "v6e" {
		cores = t.Chips
	}
	t.AcceleratorType = fmt.Sprintf("%s-%d", gen, cores)
	return t, nil
}

// cubeOrLarger: every dimension at least 4 (a v4 cube is 4x4x4).
func cubeOrLarger(dims [3]int) bool { return dims[0] >= 4 && dims[1] >= 4 && dims[2] >= 4 }

// wrap is the device plugin's wrap: v3, v4, v5p, tpu7x wrap every dimension from a cube up; v5litepod and v6e
// wrap a dimension of 16.
func wrap(gen string, dims [3]int) string {
	w := []string{"false", "false", "false"}
	for i := range dims {
		switch gen {
		case "v5litepod", "v6e":
			if dims[i] == 16 {
				w[i] = "true"
			}
		default:
			if cubeOrLarger(dims) {
				w[i] = "true"
			}
		}
	}
	return strings.Join(w, ",")
}

// DeviceEnv is what the TPU device plugin gives a container that requests chips on a node of t (InitEnvs):
// name/value pairs in a fixed order. The node's chip count, which the plugin reads from the node's
// cloud.google.com/gke-accelerator-count label, is taken to be the chips requested (so it is on a multi-host
// slice, where a pod takes its whole node).
func DeviceEnv(t *TPU) [][2]string {
	dims, _ := topologyDims(t.Topology) // checked by TPUOf
	env := [][2]string{
		{EnvTPUSkipMDSQuery, "true"},
		{EnvTPURuntimeMetricPorts, metricsPorts(t.ChipsPerHost)},
		{EnvTPUTopology, t.Topology},
		{EnvTPUAcceleratorType, t.AcceleratorType},
	}
	if t.Podslice {
		if t.Generation == "v4" || t.Generation == "v5p" || t.Generation == "tpu7x" {
			if cubeOrLarger(dims) {
				env = append(env, [2]string{EnvEnableICIResiliency, "true"})
			}
		}
		w := wrap(t.Generation, dims)
		env = append(env,
			[2]string{EnvTPUTopologyAlt, "false"}, [2]string{"ALT", "false"},
			[2]string{EnvTPUTopologyWrap, w}, [2]string{"WRAP", w},
			[2]string{"HOST_BOUNDS", t.HostBounds}, [2]string{EnvTPUHostBounds, t.HostBounds},
			[2]string{"CHIPS_PER_HOST_BOUNDS", t.ChipsPerHostBounds}, [2]string{EnvTPUChipsPerHostBounds, t.ChipsPerHostBounds})
	}
	// One host holds the whole slice: the plugin names it (before tpu7x, where another component does).
	if t.Hosts == 1 && slices.Index(generations, t.Generation) < slices.Index(generations, "tpu7x") {
		env = append(env, [2]string{EnvTPUWorkerID, "0"}, [2]string{EnvTPUWorkerHostnames, "localhost"})
	}
	return env
}

// metricsPorts is acceleratorCountToMetricsPorts: one port per chip from 8431.
func metricsPorts(chips int) string {
	ports := make([]int, chips)
	for i := range ports {
		ports[i] = 8431 + i
	}
	return joinInts(ports)
}

// WebhookEnv is what GKE's TPU webhook adds to a TPU container of a pod of an Indexed Job with a subdomain and
// parallelism > 1, appended to the container's env: TPU_WORKER_ID, the pod's completion index (written here as
// a downward-API reference to the Job controller's completion-index annotation; whether GKE writes that or the
// number itself is unverified, the value is the same), and TPU_WORKER_HOSTNAMES, the DNS names
// <job name>-<index>.<subdomain> of the Job's pods, indexes 0 to completions-1 in order. It names the pods of one
// Job only: in a multislice JobSet every slice (Job) has its own list.
func WebhookEnv(jobName, subdomain string, completions int) []corev1.EnvVar {
	hosts := make([]string, completions)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("%s-%d.%s", jobName, i, subdomain)
	}
	return []corev1.EnvVar{
		{Name: EnvTPUWorkerID, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: fmt.Sprintf("metadata.annotations['%s']", JobCompletionIndexKey)}}},
		{Name: EnvTPUWorkerHostnames, Value: strings.Join(hosts, ",")},
	}
}
