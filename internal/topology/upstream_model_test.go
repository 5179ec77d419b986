package topology

// A small model, in Go, of what the upstream runtimes compute from a process environment: torch_xla's topology and
// runtime functions, xmp.spawn's parent and child, the xla:// rendezvous handler, JAX's cloud-TPU cluster
// detection, and what libtpu is handed. Each function names the upstream file and function it models; the facts
// are in docs/TOPOLOGY.md. Sources read: pytorch/xla 41398bf (2026-04-23) torch_xla/_internal/tpu.py, pjrt.py,
// rendezvous.py, torch_xla/runtime.py, torch_xla/__init__.py, torch_xla/utils/utils.py; jax-ml/jax cec06d1
// (2026-08-08) jax/_src/distributed.py, jax/_src/clusters/cluster.py, cloud_tpu_cluster.py, __init__.py,
// jax/_src/cloud_tpu_init.py (JAX and the launcher model are in upstream_jax_test.go). It is written from the
// behaviour, not translated: no upstream code is copied.
//
// libtpu is closed; what it does with its inputs is modelled (libtpuSees) as "each value from env when set, else
// from the slice description", which is an assumption (docs/TOPOLOGY.md, unverified).

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// pyError is a Python exception raised by the modelled code: its type and message.
type pyError struct{ Type, Msg string }

func (e *pyError) Error() string { return e.Type + ": " + e.Msg }

func raise(typ, format string, args ...any) error {
	return &pyError{Type: typ, Msg: fmt.Sprintf(format, args...)}
}

// pyEnv is a process environment as os.environ holds it.
type pyEnv map[string]string

func (e pyEnv) clone() pyEnv {
	out := make(pyEnv, len(e))
	for k, v := range e {
		out[k] = v
	}
	return out
}

// setdefault is os.environ.setdefault: a value already there, even empty, is kept.
func (e pyEnv) setdefault(k, v string) {
	if _, ok := e[k]; !ok {
		e[k] = v
	}
}

// gceMetadata is what one host's metadata server answers: nil means unreachable (requests raises ConnectionError),
// a missing key answers 404.
type gceMetadata map[string]string

// get is tpu.py _get_metadata: requests.get(...) then resp.raise_for_status().
func (m gceMetadata) get(key string) (string, error) {
	if m == nil {
		return "", raise("ConnectionError", "metadata server unreachable")
	}
	v, ok := m[key]
	if !ok {
		return "", raise("HTTPError", "404 for %s", key)
	}
	return v, nil
}

// yamlTPUEnv is yaml.load of a tpu-env body of lines KEY: 'value' (the fixtures quote every value, so all are str).
func yamlTPUEnv(body string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(body, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		out[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), "'")
	}
	return out
}

// ---- torch_xla ----

// txUsingEnvVars is tpu.py _using_env_vars: getenv_as(TPU_SKIP_MDS_QUERY, str, False), truthy for any non-empty
// string ("0" included).
func txUsingEnvVars(e pyEnv) bool { return e["TPU_SKIP_MDS_QUERY"] != "" }

// pyOpt is a Python value that may be None.
type pyOpt struct {
	V  string
	OK bool
}

func (e pyEnv) opt(k string) pyOpt { v, ok := e[k]; return pyOpt{v, ok} }

func (o pyOpt) or(d pyOpt) pyOpt {
	if o.OK {
		return o
	}
	return d
}

// txGetTPUEnv is tpu.py get_tpu_env: build_tpu_env_from_vars() under TPU_SKIP_MDS_QUERY (ACCELERATOR_TYPE from
// TPU_ACCELERATOR_TYPE; TPU_PROCESS_BOUNDS from TPU_PROCESS_BOUNDS else TPU_HOST_BOUNDS;
// TPU_CHIPS_PER_PROCESS_BOUNDS from itself else TPU_CHIPS_PER_HOST_BOUNDS; WORKER_ID from CLOUD_TPU_TASK_ID else
// TPU_WORKER_ID), else the metadata server's tpu-env.
func txGetTPUEnv(e pyEnv, m gceMetadata) (map[string]pyOpt, error) {
	if txUsingEnvVars(e) {
		return map[string]pyOpt{
			"ACCELERATOR_TYPE":             e.opt("TPU_ACCELERATOR_TYPE"),
			"TPU_PROCESS_BOUNDS":           e.opt("TPU_PROCESS_BOUNDS").or(e.opt("TPU_HOST_BOUNDS")),
			"TPU_CHIPS_PER_PROCESS_BOUNDS": e.opt("TPU_CHIPS_PER_PROCESS_BOUNDS").or(e.opt("TPU_CHIPS_PER_HOST_BOUNDS")),
			"WORKER_ID":                    e.opt("CLOUD_TPU_TASK_ID").or(e.opt("TPU_WORKER_ID")),
		}, nil
	}
	body, err := m.get("tpu-env")
	if err != nil {
		return nil, err
	}
	out := map[string]pyOpt{}
	for k, v := range yamlTPUEnv(body) {
		out[k] = pyOpt{v, true}
	}
	return out, nil
}

var txVersionRE = regexp.MustCompile(`^(?:v|tpu)(\d)[A-Za-z]{0,7}-(\d+)$`)

// txVersion is tpu.py version(): the digit of ACCELERATOR_TYPE. An HTTPError becomes EnvironmentError; a missing
// type is re.match(pattern, None), a TypeError.
func txVersion(e pyEnv, m gceMetadata) (int, error) {
	env, err := txGetTPUEnv(e, m)
	var pe *pyError
	if errors.As(err, &pe) && pe.Type == "HTTPError" {
		return 0, raise("OSError", "Failed to get TPU metadata")
	}
	if err != nil {
		return 0, err
	}
	t, ok := env["ACCELERATOR_TYPE"]
	if !ok || !t.OK {
		return 0, raise("TypeError", "expected string or bytes-like object, got 'NoneType'")
	}
	mm := txVersionRE.FindStringSubmatch(t.V)
	if mm == nil {
		return 0, raise("OSError", "Failed to parse TPU version from metadata")
	}
	return int(mm[1][0] - '0'), nil
}

func pyInt(o pyOpt) (int, error) {
	if !o.OK {
		return 0, raise("TypeError", "int() argument must be a string, not 'NoneType'")
	}
	n, err := strconv.Atoi(strings.TrimSpace(o.V))
	if err != nil {
		return 0, raise("ValueError", "invalid literal for int() with base 10: %q", o.V)
	}
	return n, nil
}

// txHostIndex is runtime.py host_index() on TPU: tpu.py worker_id(), int(get_tpu_env()[WORKER_ID]).
func txHostIndex(e pyEnv, m gceMetadata) (int, error) {
	env, err := txGetTPUEnv(e, m)
	if err != nil {
		return 0, err
	}
	return pyInt(env["WORKER_ID"])
}

// txTaskID is tpu.py task_id(): getenv_as(CLOUD_TPU_TASK_ID, int), None when unset (-1 here).
func txTaskID(e pyEnv) (int, error) {
	o := e.opt("CLOUD_TPU_TASK_ID")
	if !o.OK {
		return -1, nil
	}
	return pyInt(o)
}

// txWorkerIPs is tpu.py get_worker_ips(): TPU_WORKER_HOSTNAMES split on ',' under TPU_SKIP_MDS_QUERY, else the third
// ':'-field of every worker-network-endpoints entry (IndexError on the host-name format); one entry is localhost.
func txWorkerIPs(e pyEnv, m gceMetadata) ([]string, error) {
	var hosts []string
	if txUsingEnvVars(e) {
		hosts = strings.Split(e["TPU_WORKER_HOSTNAMES"], ",")
	} else {
		body, err := m.get("worker-network-endpoints")
		if err != nil {
			return nil, err
		}
		for _, w := range strings.Split(body, ",") {
			f := strings.Split(w, ":")
			if len(f) < 3 {
				return nil, raise("IndexError", "list index out of range")
			}
			hosts = append(hosts, f[2])
		}
	}
	if len(hosts) > 1 {
		return hosts, nil
	}
	return []string{"localhost"}, nil
}

// txMeshShape is tpu.py MeshShape.from_string: int() of every ','-part, exactly three of them.
func txMeshShape(s pyOpt) ([3]int, error) {
	var out [3]int
	if !s.OK {
		return out, raise("AttributeError", "'NoneType' object has no attribute 'split'")
	}
	parts := strings.Split(s.V, ",")
	for _, p := range parts {
		if _, err := pyInt(pyOpt{p, true}); err != nil {
			return out, err
		}
	}
	if len(parts) != 3 {
		return out, raise("ValueError", "Mesh shape '%s' should be length 3", s.V)
	}
	for i, p := range parts {
		out[i], _ = strconv.Atoi(strings.TrimSpace(p))
	}
	return out, nil
}

// txNumLocalProcesses is tpu.py num_local_processes(): the PCI chips, or fewer when TPU_PROCESS_BOUNDS is smaller
// (process_bounds_size parses it with MeshShape.from_string).
func txNumLocalProcesses(e pyEnv, chips int) (int, error) {
	pb := e.opt("TPU_PROCESS_BOUNDS")
	if !pb.OK || pb.V == "" {
		return chips, nil
	}
	m, err := txMeshShape(pb)
	if err != nil {
		return 0, err
	}
	return min(chips, m[0]*m[1]*m[2]), nil
}

// txHostBoundsV2V3 is tpu.py _ACCELERATOR_TYPE_TO_HOST_BOUNDS: the host grids of v2 and v3 slices (data).
var txHostBoundsV2V3 = map[string]string{
	"v2-8": "1,1,1", "v2-32": "2,2,1", "v2-128": "4,4,1", "v2-256": "4,8,1", "v2-512": "8,8,1",
	"v3-8": "1,1,1", "v3-32": "2,2,1", "v3-64": "2,4,1", "v3-128": "4,4,1", "v3-256": "4,8,1", "v3-512": "8,8,1",
	"v3-1024": "8,16,1", "v3-2048": "16,16,1",
}

// txConfigureOneChip is tpu.py configure_one_chip_topology: defaults for one process on chip 0.
func txConfigureOneChip(e pyEnv) {
	e.setdefault("TPU_VISIBLE_CHIPS", "0")
	e.setdefault("TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1")
	e.setdefault("TPU_PROCESS_BOUNDS", "1,1,1")
}

// txConfigureTopology is tpu.py configure_topology(local_rank, local_world_size): process bounds = tpu-env's
// TPU_PROCESS_BOUNDS x TPU_CHIPS_PER_PROCESS_BOUNDS (v4 on) or the v2/v3 table x 2,2,1, with ",2" for generation
// 7; task id = WORKER_ID x local_world_size + local_rank; addresses = every worker ip x the ports from 8476. Every
// variable by setdefault.
func txConfigureTopology(e pyEnv, m gceMetadata, lr, lws int) error {
	env, err := txGetTPUEnv(e, m)
	if err != nil {
		return err
	}
	accel := env["ACCELERATOR_TYPE"]
	v, err := txVersion(e, m)
	if err != nil {
		return err
	}
	var pb, cpp [3]int
	if v >= 4 {
		if pb, err = txMeshShape(env["TPU_PROCESS_BOUNDS"]); err != nil {
			return err
		}
		if cpp, err = txMeshShape(env["TPU_CHIPS_PER_PROCESS_BOUNDS"]); err != nil {
			return err
		}
	} else {
		hb, ok := txHostBoundsV2V3[accel.V]
		if !ok {
			return raise("KeyError", "%q", accel.V)
		}
		pb, _ = txMeshShape(pyOpt{hb, true})
		cpp = [3]int{2, 2, 1}
	}
	e.setdefault("TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1")
	pbs := fmt.Sprintf("%d,%d,%d", pb[0]*cpp[0], pb[1]*cpp[1], pb[2]*cpp[2])
	if v == 7 {
		pbs += ",2"
	}
	e.setdefault("TPU_PROCESS_BOUNDS", pbs)
	wid, err := pyInt(env["WORKER_ID"])
	if err != nil {
		return err
	}
	e.setdefault("CLOUD_TPU_TASK_ID", strconv.Itoa(wid*lws+lr))
	ips, err := txWorkerIPs(e, m)
	if err != nil {
		return err
	}
	var addrs []string
	for _, ip := range ips {
		for p := 8476; p < 8476+lws; p++ {
			addrs = append(addrs, ip+":"+strconv.Itoa(p))
		}
	}
	e.setdefault("TPU_PROCESS_ADDRESSES", strings.Join(addrs, ","))
	e.setdefault("TPU_VISIBLE_CHIPS", strconv.Itoa(lr))
	e.setdefault("TPU_PROCESS_PORT", strconv.Itoa(8476+lr))
	return nil
}

// txInitializeMultiprocess is pjrt.py initialize_multiprocess on TPU (no dynamic plugins).
func txInitializeMultiprocess(e pyEnv, m gceMetadata, lr, lws int) error {
	e.setdefault("PJRT_LOCAL_PROCESS_RANK", strconv.Itoa(lr))
	e.setdefault("PJRT_LOCAL_PROCESS_COUNT", strconv.Itoa(lws))
	return txConfigureTopology(e, m, lr, lws)
}

// txInitializeSingleprocess is pjrt.py initialize_singleprocess on TPU.
func txInitializeSingleprocess(e pyEnv) {
	e.setdefault("PJRT_LOCAL_PROCESS_COUNT", "1")
	txConfigureOneChip(e)
}

// txImport is `import torch_xla` on a TPU host (__init__.py _setup_default_env): with PCI chips present it calls
// tpu.version() (through _setup_libtpu_flags) and sets ALLOW_MULTIPLE_LIBTPU_LOAD=1 by default.
func txImport(e pyEnv, m gceMetadata, chips int) error {
	if chips == 0 {
		return nil
	}
	if _, err := txVersion(e, m); err != nil {
		return err
	}
	e.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
	return nil
}

// txXLARendezvous is rendezvous.py pjrt_rendezvous_handler's set-up (init_method='xla://'): under torchelastic
// (TORCHELASTIC_RUN_ID set: torch's is_torchelastic_launched) it re-runs the process set-up from LOCAL_RANK and
// LOCAL_WORLD_SIZE, multiprocess when the latter is above 1. It changes e in place.
func txXLARendezvous(e pyEnv, m gceMetadata) error {
	if _, ok := e["TORCHELASTIC_RUN_ID"]; !ok {
		return nil
	}
	lws, err := pyInt(e.opt("LOCAL_WORLD_SIZE"))
	if err != nil {
		return err
	}
	lr, err := pyInt(e.opt("LOCAL_RANK"))
	if err != nil {
		return err
	}
	if lws > 1 {
		return txInitializeMultiprocess(e, m, lr, lws)
	}
	txInitializeSingleprocess(e)
	return nil
}

// xmpChild is the environment of xmp.spawn(fn, nprocs)'s process of local rank lr on a host whose parent has env
// parent (pjrt.py spawn): nprocs=1 runs fn in the parent itself after initialize_singleprocess; otherwise the parent
// starts tpu.num_local_processes() children, each importing torch_xla and running initialize_multiprocess. It
// returns the process count too.
func xmpChild(parent pyEnv, m gceMetadata, chips int, nprocs1 bool, lr int) (pyEnv, int, error) {
	if err := txImport(parent.clone(), m, chips); err != nil { // the parent imports torch_xla first
		return nil, 0, err
	}
	e := parent.clone()
	if nprocs1 {
		if err := txImport(e, m, chips); err != nil {
			return nil, 0, err
		}
		txInitializeSingleprocess(e)
		return e, 1, nil
	}
	k, err := txNumLocalProcesses(parent, chips)
	if err != nil {
		return nil, 0, err
	}
	if err := txImport(e, m, chips); err != nil {
		return nil, 0, err
	}
	if err := txInitializeMultiprocess(e, m, lr, k); err != nil {
		return nil, 0, err
	}
	return e, k, nil
}

// ---- libtpu (modelled, unverified) ----

// libtpuView is what libtpu is handed in a process: each value from env where set, else from the slice
// description (env under TPU_SKIP_MDS_QUERY, the metadata server otherwise), and what follows from it for torch_xla's
// runtime.global_ordinal() / world_size() / local_ordinal() (global device = task x devices per process + local
// device).
type libtpuView struct {
	Task, Processes, DevicesPerProcess int
	Addresses, Port, Visible           string
	ChipsPerProcess, ProcessBounds     string
	Accelerator, HostBounds, CPHB      string
	WorkerID                           string
	Hosts                              string
}

func libtpuSees(e pyEnv, m gceMetadata, chips, coresPerChip int) libtpuView {
	md := map[string]string{}
	if body, err := m.get("tpu-env"); err == nil && !txUsingEnvVars(e) {
		md = yamlTPUEnv(body)
	}
	slice := func(envKey, mdKey string) string {
		if v, ok := e[envKey]; ok {
			return v
		}
		return md[mdKey]
	}
	v := libtpuView{
		Addresses: e["TPU_PROCESS_ADDRESSES"], Port: e["TPU_PROCESS_PORT"],
		Accelerator: slice("TPU_ACCELERATOR_TYPE", "ACCELERATOR_TYPE"), HostBounds: slice("TPU_HOST_BOUNDS", "HOST_BOUNDS"),
		CPHB: slice("TPU_CHIPS_PER_HOST_BOUNDS", "CHIPS_PER_HOST_BOUNDS"), WorkerID: slice("TPU_WORKER_ID", "WORKER_ID"),
		ChipsPerProcess: slice("TPU_CHIPS_PER_PROCESS_BOUNDS", "TPU_CHIPS_PER_PROCESS_BOUNDS"),
		ProcessBounds:   slice("TPU_PROCESS_BOUNDS", "TPU_PROCESS_BOUNDS"),
	}
	if h, ok := e["TPU_WORKER_HOSTNAMES"]; ok {
		v.Hosts = h
	} else if body, err := m.get("worker-network-endpoints"); err == nil && !txUsingEnvVars(e) {
		var hs []string
		for _, w := range strings.Split(body, ",") {
			f := strings.Split(w, ":")
			hs = append(hs, f[len(f)-1])
		}
		v.Hosts = strings.Join(hs, ",")
	}
	if hb, ok := txHostBoundsV2V3[v.Accelerator]; ok {
		// v2 and v3 metadata carry no bounds: their grids are torch_xla's table and 2x2 chips a host (configure_topology).
		if v.HostBounds == "" {
			v.HostBounds = hb
		}
		if v.CPHB == "" {
			v.CPHB = "2,2,1"
		}
	}
	if v.ChipsPerProcess == "" {
		v.ChipsPerProcess = v.CPHB
	}
	if v.ProcessBounds == "" {
		v.ProcessBounds = v.HostBounds
	}
	v.Visible = e["TPU_VISIBLE_CHIPS"]
	if _, ok := e["TPU_VISIBLE_CHIPS"]; !ok {
		all := make([]int, chips)
		for i := range all {
			all[i] = i
		}
		v.Visible = joinInts(all, ",")
	}
	if b, err := ParseBounds(v.ProcessBounds); err == nil {
		v.Processes = b[:3].Product()
	}
	v.Task, _ = strconv.Atoi(v.WorkerID)
	if t, ok := e["CLOUD_TPU_TASK_ID"]; ok {
		v.Task, _ = strconv.Atoi(t)
	}
	v.DevicesPerProcess = len(strings.Split(v.Visible, ",")) * coresPerChip
	return v
}
