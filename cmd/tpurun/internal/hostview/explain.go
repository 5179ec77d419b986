package hostview

import (
	"fmt"
	"strconv"
	"strings"

	"tpurun/internal/topology"
)

// Explain says, for people, how the workers of req on host h will see their topology where tpurun chose between
// upstream behaviours (docs/TOPOLOGY.md): whether torch_xla in a worker reads the metadata server or env and what
// its host_index() then returns, tpu7x's process bounds, the one-chip run, single-host addresses, SPMD's chips,
// GPU visibility, and what jax.distributed.initialize() needs. A request that does not plan gets no notes (the plan
// error says why).
func Explain(h *topology.Host, req topology.Request) []string {
	switch h.Device.V {
	case topology.TPU:
		return explainTPU(h, req)
	case topology.GPU:
		return explainGPU(h, req)
	}
	return []string{jaxNeedsIDs("")} // CPU
}

func explainTPU(h *topology.Host, req topology.Request) []string {
	s, err := h.Slice(req)
	if err != nil {
		return nil
	}
	t := h.TPUFacts()
	out := []string{skipNote(h, req, s)}
	if t.HostnameEndpoints {
		out = append(out, "worker-network-endpoints lists host names only (the newer format): JAX reads it, torch_xla's "+
			"get_worker_ips cannot, so the workers get the host list in env")
	}
	out = append(out, processNotes(t, req, s)...)
	if len(s.Hosts) == 1 && !s.SPMD && !s.SingleProcess {
		out = append(out, "TPU_PROCESS_ADDRESSES name localhost, as torch_xla's get_worker_ips does for any single host; "+
			"TPU_WORKER_HOSTNAMES is not set (a parent's value is kept), so JAX's cluster detection finds what it finds upstream")
	}
	if note := jaxTPUNote(s); note != "" {
		out = append(out, note)
	}
	return out
}

// skipNote says whether torch_xla in a worker reads the slice from the metadata server or env, and so what its
// host_index() returns.
func skipNote(h *topology.Host, req topology.Request, s *topology.Slice) string {
	skip, why := h.WorkerSkipMDS(req)
	const taskIndex = "its host_index() returns CLOUD_TPU_TASK_ID (the global process index) where that is set and " +
		"TPU_WORKER_ID elsewhere; for the host index read TPU_WORKER_ID or compute RANK // LOCAL_WORLD_SIZE"
	switch why {
	case topology.SkipFromParent:
		return fmt.Sprintf("workers keep TPU_SKIP_MDS_QUERY=%s (%s): torch_xla reads the slice from env, as in "+
			"xmp.spawn's children on GKE; %s", skip, h.TPUFacts().SkipMDS.Source, taskIndex)
	case topology.SkipReadMetadata:
		return fmt.Sprintf("workers get no TPU_SKIP_MDS_QUERY: torch_xla reads the slice from the metadata server, as "+
			"tpurun did and as in xmp.spawn's children, so its host_index() is this host's WORKER_ID (%d)", s.WorkerID)
	case topology.SkipSupplied:
		return fmt.Sprintf("workers get TPU_SKIP_MDS_QUERY=true and the slice in env, because %s: torch_xla reads "+
			"it from there (on GCE xmp.spawn's children would ask the metadata server); %s", suppliedBecause(h), taskIndex)
	}
	return "workers get no TPU_SKIP_MDS_QUERY: the accelerator type is unknown (v2 and v3 chips share PCI id " +
		"0x0027 and the metadata server did not name it), and torch_xla's version() reads TPU_ACCELERATOR_TYPE under it; " +
		"`import torch_xla` in a worker asks the metadata server as xmp.spawn's would. Set TPU_ACCELERATOR_TYPE (v2-8, " +
		"v3-8, ...) to run without it"
}

// processNotes explain the processes of the run: the one-chip run, SPMD's chips, a count from TPU_PROCESS_BOUNDS
// and tpu7x's process bounds.
func processNotes(t topology.TPUFacts, req topology.Request, s *topology.Slice) []string {
	switch {
	case s.SingleProcess:
		note := fmt.Sprintf("nprocs 1 is xmp.spawn(nprocs=1)'s one-chip run: one process on chip %d with "+
			"TPU_PROCESS_BOUNDS=1,1,1, no CLOUD_TPU_TASK_ID (torch_xla's task_id() is None) and no process addresses", s.VisibleChips[0])
		if len(s.SliceHosts) > 1 {
			note += fmt.Sprintf("; this host alone, keeping host %d of the %d-host slice in TPU_WORKER_ID and "+
				"TPU_WORKER_HOSTNAMES as upstream does (JAX's detection then expects every host)", s.WorkerID, len(s.SliceHosts))
		}
		return []string{note}
	case s.SPMD:
		return []string{fmt.Sprintf("SPMD: one process per host sees chips %s; TPU_VISIBLE_CHIPS is set to all of them "+
			"because under TORCHELASTIC_RUN_ID torch_xla's xla:// handler sets TPU_VISIBLE_CHIPS=0 when it is unset",
			joinInts(s.VisibleChips))}
	}
	var out []string
	if t.ProcessBounds.IsSet() && req.NProcs == 0 && s.ProcsPerHost < len(t.Usable.V) {
		out = append(out, fmt.Sprintf("TPU_PROCESS_BOUNDS=%s (%s) runs %d processes on this host: torch_xla's "+
			"num_local_processes takes the smaller of the chips and its size", t.ProcessBounds.V, t.ProcessBounds.Source, s.ProcsPerHost))
	}
	if t.Family == "tpu7x" {
		out = append(out, tpu7xNote(s))
	}
	return out
}

// tpu7xNote says why tpu7x's process bounds have, or lack, the core dimension.
func tpu7xNote(s *topology.Slice) string {
	if len(s.ProcessBounds) == 4 {
		return fmt.Sprintf("TPU_PROCESS_BOUNDS=%s carries tpu7x's core dimension as xmp.spawn writes it; "+
			"the workers read the metadata server, so the xla:// handler never re-parses it", s.ProcessBounds)
	}
	return fmt.Sprintf("TPU_PROCESS_BOUNDS=%s has three numbers on tpu7x: under TPU_SKIP_MDS_QUERY "+
		"torch_xla's xla:// handler re-parses it and accepts only three, where xmp.spawn writes a fourth (,2); "+
		"whether libtpu wants the ,2 is unverified", s.ProcessBounds)
}

// jaxTPUNote says what jax.distributed.initialize() needs on the slice; "" for a one-process run.
func jaxTPUNote(s *topology.Slice) string {
	switch {
	case s.SPMD && len(s.Hosts) > 1:
		return "JAX: jax.distributed.initialize() needs no arguments here: one process per host, whose id is TPU_WORKER_ID"
	case !s.SPMD && !s.SingleProcess && (s.ProcsPerHost > 1 || len(s.Hosts) > 1):
		return fmt.Sprintf("JAX: jax.distributed.initialize() detects a cloud-TPU cluster from "+
			"TPU_PROCESS_ADDRESSES and takes TPU_WORKER_ID (the host index) as the process id, which repeats with %d "+
			"processes per host: %s, or run one process per host (SPMD)", s.ProcsPerHost, jaxArgs)
	}
	return ""
}

// suppliedBecause says why tpurun hands the slice to the workers in env rather than letting them read the metadata
// server as xmp.spawn's children do.
func suppliedBecause(h *topology.Host) string {
	t := h.TPUFacts()
	switch {
	case h.MetadataErr != nil:
		return "the metadata server failed (" + h.MetadataErr.Error() + ")"
	case t.HostnameEndpoints:
		return "torch_xla cannot read the metadata server's host list"
	case t.TorchXLAMetadata:
		return "the rendezvous agreed on hosts or a node order other than the metadata server's"
	case t.Accelerator.Source.Kind == topology.FromMetadata || t.Hostnames.Source.Kind == topology.FromMetadata:
		return "the metadata server lacks values torch_xla reads (tpu-env's ACCELERATOR_TYPE, WORKER_ID, TPU_PROCESS_BOUNDS, " +
			"TPU_CHIPS_PER_PROCESS_BOUNDS) or env gave part of the slice"
	}
	var from []string
	for _, s := range []topology.Source{t.Accelerator.Source, t.Hostnames.Source, t.WorkerID.Source} {
		if s.IsSet() && s.Kind != topology.FromDefault { // given, or derived from what was
			from = append(from, s.String())
		}
	}
	if len(from) == 0 {
		return "tpurun planned it without the metadata server"
	}
	return "tpurun planned it from " + strings.Join(from, ", ")
}

func explainGPU(h *topology.Host, req topology.Request) []string {
	var out []string
	seen := "every GPU"
	if v := h.CUDAVisible(); v.IsSet() {
		seen = "GPUs " + strings.Join(v.V, ",") + " (the parent's CUDA_VISIBLE_DEVICES)"
	}
	if req.IsolateGPUs {
		out = append(out, "each worker sees only its own GPU (CUDA_VISIBLE_DEVICES per rank, as asked): a program that "+
			"selects cuda:LOCAL_RANK fails from local rank 1 with \"invalid device ordinal\"")
	} else {
		out = append(out, "workers see "+seen+", as under torchrun, and each uses cuda:LOCAL_RANK; per-rank "+
			"CUDA_VISIBLE_DEVICES only on request")
	}
	return append(out, jaxNeedsIDs(" and JAX_LOCAL_DEVICE_IDS (this worker's GPU)"))
}

const jaxArgs = "pass process_id=int(os.environ['JAX_PROCESS_ID']), num_processes=int(os.environ['JAX_NUM_PROCESSES']), " +
	"or call tpurun.jax_initialize()"

func jaxNeedsIDs(localIDs string) string {
	return "JAX: jax.distributed.initialize() reads JAX_COORDINATOR_ADDRESS" + localIDs + " from env but no process id " +
		"or count, and detects no cluster on this host: " + jaxArgs
}

// joinInts renders 0,1,2.
func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
