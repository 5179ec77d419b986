package topology

// JAX's side of the upstream model (upstream_model_test.go): how jax.distributed.initialize() settles on a
// coordinator, process count and id (jax-ml/jax cec06d1 jax/_src/distributed.py, _src/clusters/cluster.py,
// cloud_tpu_cluster.py, __init__.py, _src/cloud_tpu_init.py), and how tpurun's launcher composes a worker's env.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// jaxCluster is what jax.distributed.initialize() settles on: coordinator "host:port", process count and id.
type jaxCluster struct {
	Kind        string // the ClusterEnv that answered ("gketpu", "gcetpu"), "" for none
	Coordinator string
	Processes   int
	ID          int
}

// jaxGetMetadata is cloud_tpu_cluster.py get_metadata: 6 tries, the text and status of the last one; requests
// raises when the server is unreachable.
func jaxGetMetadata(m gceMetadata, key string) (string, int, error) {
	if m == nil {
		return "", 0, raise("ConnectionError", "metadata server unreachable")
	}
	if v, ok := m[key]; ok {
		return v, 200, nil
	}
	return "", 404, nil
}

// jaxTPUEnvValue is cloud_tpu_cluster.py get_tpu_env_value: env first, then tpu-env from the metadata server.
func jaxTPUEnvValue(e pyEnv, m gceMetadata, key string) (pyOpt, error) {
	if v, ok := e[key]; ok {
		return pyOpt{v, true}, nil
	}
	body, _, err := jaxGetMetadata(m, "tpu-env")
	if err != nil {
		return pyOpt{}, err
	}
	var out pyOpt
	for _, l := range strings.Split(body, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == key {
			out = pyOpt{strings.Trim(strings.TrimSpace(v), "'"), true}
		}
	}
	return out, nil
}

// jaxInitialize is distributed.py State.initialize's choice of coordinator, count and id with the given explicit
// arguments (nil = not passed): JAX_COORDINATOR_ADDRESS and JAX_LOCAL_DEVICE_IDS from env, then, when any is still
// None, the first ClusterEnv whose is_env_present() holds (cluster.py auto_detect_unset_distributed_params; order of
// clusters/__init__.py: OpenMPI, Slurm, (mpi4py, opt-in), GkeTpuCluster, GceTpuCluster, K8s) fills the rest. The
// cloud-TPU clusters need running_in_cloud_tpu_vm (cloud_tpu_init.py: libtpu found and PCI chips present).
func jaxInitialize(e pyEnv, m gceMetadata, cloudTPUVM bool, processID, numProcesses *int) (jaxCluster, error) {
	var c jaxCluster
	coord := e.opt("JAX_COORDINATOR_ADDRESS")
	ids := e["JAX_LOCAL_DEVICE_IDS"]
	haveIDs := ids != ""
	if !coord.OK || processID == nil || numProcesses == nil || !haveIDs {
		kind, err := jaxDetect(e, m, cloudTPUVM)
		if err != nil {
			return c, err
		}
		c.Kind = kind
		if kind != "" {
			if !coord.OK {
				a, err := jaxCoordinator(e, m, kind)
				if err != nil {
					return c, err
				}
				coord = pyOpt{a, true}
			}
			if numProcesses == nil {
				n, err := jaxProcessCount(e, m, kind)
				if err != nil {
					return c, err
				}
				numProcesses = &n
			}
			if processID == nil {
				id, err := jaxProcessID(e, m, kind)
				if err != nil {
					return c, err
				}
				processID = &id
			}
		}
	}
	switch {
	case !coord.OK:
		return c, raise("ValueError", "coordinator_address should be defined.")
	case numProcesses == nil:
		return c, raise("ValueError", "Number of processes must be defined.")
	case processID == nil:
		return c, raise("ValueError", "The process id of the current process must be defined.")
	case *processID < 0 || *processID >= *numProcesses:
		return c, raise("ValueError", "process_id and num_processes must be nonnegative, with process_id < num_processes.")
	}
	c.Coordinator, c.Processes, c.ID = coord.V, *numProcesses, *processID
	return c, nil
}

// jaxDetect is which cloud-TPU ClusterEnv is present: GkeTpuCluster when TPU_PROCESS_ADDRESSES or
// TPU_WORKER_HOSTNAMES is set (even empty); GceTpuCluster when TPU_SKIP_MDS_QUERY is unset and the metadata server
// answers agent-worker-number. The other kinds need variables these tests never set (OMPI_*, SLURM_*, Kubernetes).
func jaxDetect(e pyEnv, m gceMetadata, cloudTPUVM bool) (string, error) {
	if !cloudTPUVM {
		return "", nil
	}
	_, addrs := e["TPU_PROCESS_ADDRESSES"]
	_, hosts := e["TPU_WORKER_HOSTNAMES"]
	if addrs || hosts {
		return "gketpu", nil
	}
	if _, skip := e["TPU_SKIP_MDS_QUERY"]; skip {
		return "", nil
	}
	if _, code, err := jaxGetMetadata(m, "agent-worker-number"); err != nil {
		return "", err
	} else if code == 200 {
		return "gcetpu", nil
	}
	return "", nil
}

// jaxWorkers is _get_worker_list_in_slice: GKE, TPU_PROCESS_ADDRESSES else TPU_WORKER_HOSTNAMES split on ','; GCE,
// worker-network-endpoints entries, a host name alone or the third of name:id:ip.
func jaxWorkers(e pyEnv, m gceMetadata, kind string) ([]string, error) {
	if kind == "gketpu" {
		if v, ok := e["TPU_PROCESS_ADDRESSES"]; ok {
			return strings.Split(v, ","), nil
		}
		return strings.Split(e["TPU_WORKER_HOSTNAMES"], ","), nil
	}
	body, _, err := jaxGetMetadata(m, "worker-network-endpoints")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, w := range strings.Split(body, ",") {
		switch f := strings.Split(w, ":"); len(f) {
		case 1:
			out = append(out, f[0])
		case 3:
			out = append(out, f[2])
		default:
			return nil, raise("ValueError", "unsupported worker-network-endpoints format: %s", w)
		}
	}
	return out, nil
}

func jaxSlices(e pyEnv, m gceMetadata) (num, id int, err error) {
	n, err := jaxTPUEnvValue(e, m, "MEGASCALE_NUM_SLICES")
	if err != nil {
		return 0, 0, err
	}
	num = 1
	if n.OK && n.V != "" {
		if num, err = pyInt(n); err != nil {
			return 0, 0, err
		}
	}
	s, err := jaxTPUEnvValue(e, m, "MEGASCALE_SLICE_ID")
	if err != nil {
		return 0, 0, err
	}
	if s.OK && s.V != "" {
		if id, err = pyInt(s); err != nil {
			return 0, 0, err
		}
	}
	return num, id, nil
}

// jaxCoordinator is BaseTpuCluster.get_coordinator_address: MEGASCALE_COORDINATOR_ADDRESS else the first worker,
// its host part, port 8482 (JAX_COORDINATOR_PORT overrides).
func jaxCoordinator(e pyEnv, m gceMetadata, kind string) (string, error) {
	a, err := jaxTPUEnvValue(e, m, "MEGASCALE_COORDINATOR_ADDRESS")
	if err != nil {
		return "", err
	}
	addr := a.V
	if !a.OK || addr == "" {
		ws, err := jaxWorkers(e, m, kind)
		if err != nil {
			return "", err
		}
		addr = ws[0]
	}
	addr, _, _ = strings.Cut(addr, ":")
	port := "8482"
	if p := e["JAX_COORDINATOR_PORT"]; p != "" {
		port = p
	}
	return addr + ":" + port, nil
}

// jaxProcessCount is BaseTpuCluster.get_process_count: workers in the slice x slices.
func jaxProcessCount(e pyEnv, m gceMetadata, kind string) (int, error) {
	ws, err := jaxWorkers(e, m, kind)
	if err != nil {
		return 0, err
	}
	n, _, err := jaxSlices(e, m)
	return len(ws) * n, err
}

// jaxProcessID is BaseTpuCluster.get_process_id: the id in the slice (GKE: int(str(TPU_WORKER_ID)), a ValueError
// when unset; GCE: agent-worker-number) + slice id x workers in the slice.
func jaxProcessID(e pyEnv, m gceMetadata, kind string) (int, error) {
	var in int
	var err error
	if kind == "gketpu" {
		v, ok := e["TPU_WORKER_ID"]
		if !ok {
			v = "None"
		}
		in, err = pyInt(pyOpt{v, true})
	} else {
		var body string
		body, _, err = jaxGetMetadata(m, "agent-worker-number")
		if err == nil {
			in, err = pyInt(pyOpt{body, true})
		}
	}
	if err != nil {
		return 0, err
	}
	ws, err := jaxWorkers(e, m, kind)
	if err != nil {
		return 0, err
	}
	_, sid, err := jaxSlices(e, m)
	return in + sid*len(ws), err
}

// tpurunChild is a tpurun worker's environment as internal/workerenv's For composes it: the parent's minus its
// per-rank variables, then the plan's env, then torchrun's variables (TORCHELASTIC_RUN_ID always set). Modelled
// here (not imported) so that this package's tests stand alone; the list of per-rank names is workerenv's.
func tpurunChild(parent pyEnv, p *Plan, w Worker) pyEnv {
	e := parent.clone()
	for _, k := range []string{"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_ERROR_FILE",
		"TPU_VISIBLE_CHIPS", "TPU_PROCESS_PORT", "TPU_PROCESS_ADDRESSES", "CLOUD_TPU_TASK_ID", "PJRT_LOCAL_PROCESS_RANK",
		"TPURUN_RESULT_FD", "TPURUN_REPLICAS"} {
		delete(e, k)
	}
	for k, v := range w.Env {
		e[k] = v
	}
	e["RANK"] = strconv.Itoa(w.Rank)
	e["LOCAL_RANK"] = strconv.Itoa(w.LocalRank)
	e["WORLD_SIZE"] = strconv.Itoa(len(p.Workers))
	e["LOCAL_WORLD_SIZE"] = strconv.Itoa(len(p.Local(w.NodeRank)))
	e["GROUP_RANK"] = strconv.Itoa(w.NodeRank)
	e["GROUP_WORLD_SIZE"] = strconv.Itoa(len(p.Nodes))
	e["MASTER_ADDR"] = "127.0.0.1"
	e["MASTER_PORT"] = "29500"
	e["TORCHELASTIC_RUN_ID"] = "model"
	return e
}

// envDiff lists the keys whose values differ between a and b (for messages).
func envDiff(a, b pyEnv, keys ...string) string {
	var out []string
	for _, k := range keys {
		va, oka := a[k]
		vb, okb := b[k]
		if va != vb || oka != okb {
			out = append(out, fmt.Sprintf("%s: %q(%v) vs %q(%v)", k, va, oka, vb, okb))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}
