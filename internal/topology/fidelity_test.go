package topology

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// fidelityHost is one host of a slice, described as GKE describes it (env, TPU_SKIP_MDS_QUERY=true) or as a GCE TPU
// VM does (its metadata server only).
type fidelityHost struct {
	accel  string
	worker int
	gke    bool
}

// pciIDs maps a family to the PCI device id of its chips.
var pciIDs = map[string]string{"v2": "0x0027", "v3": "0x0027", "v4": "0x005e", "v5litepod": "0x0063", "v5p": "0x0062",
	"v6e": "0x006f", "tpu7x": "0x0076"}

// setup builds the host: its fake sysfs/dev tree, the parent's env, its metadata answers (for the model) and a
// metadata server serving them (for Detect).
func (fh fidelityHost) setup(t *testing.T) (a Accelerator, ft fakeTree, parent pyEnv, md gceMetadata, mdURL string) {
	t.Helper()
	a, err := ParseAcceleratorType(fh.accel)
	must(t, err)
	ft = newTree(t).tpu(t, pciIDs[a.Family.Name], a.ChipsPerHost())
	parent, md = pyEnv{}, gceMetadata{}
	if fh.gke {
		var names []string
		for i := 0; i < a.Hosts(); i++ {
			names = append(names, fmt.Sprintf("tpu-job-0-%d.tpu-job", i))
		}
		parent = pyEnv{"TPU_SKIP_MDS_QUERY": "true", "TPU_ACCELERATOR_TYPE": a.Type, "TPU_WORKER_ID": strconv.Itoa(fh.worker),
			"TPU_WORKER_HOSTNAMES": strings.Join(names, ","), "TPU_HOST_BOUNDS": a.HostBounds().String(),
			"TPU_CHIPS_PER_HOST_BOUNDS": a.ChipsPerHostBounds().String()}
	} else {
		var eps []string
		for i := 0; i < a.Hosts(); i++ {
			eps = append(eps, fmt.Sprintf("t1v-n-0f996b37-w-%d:8470:10.130.0.%d", i, i+2))
		}
		md = gceMetadata{KeyTPUEnv: tpuEnvBody(a.Type, fh.worker), KeyEndpoints: strings.Join(eps, ","),
			KeyWorkerNumber: strconv.Itoa(fh.worker), KeyAcceleratorType: a.Type}
	}
	return a, ft, parent, md, newMD(t, md, nil).URL
}

// fidelityMode is how the job runs: tpurun's request and the upstream run it stands for.
type fidelityMode struct {
	name     string
	req      Request
	parentPB string // TPU_PROCESS_BOUNDS in the parent's env (both sides)
	upPB     string // TPU_PROCESS_BOUNDS in the parent's env of the upstream run only (its way to ask for k processes)
	nprocs1  bool   // upstream: xmp.spawn(fn, nprocs=1)
	spmd     bool   // upstream: one plain process per host with XLA_USE_SPMD=1 (SPMD has no xmp.spawn)
}

func fidelityModes(a Accelerator) []fidelityMode {
	modes := []fidelityMode{
		{name: "default"},
		{name: "nprocs 1", req: Request{NProcs: 1}, nprocs1: true},
		{name: "spmd", req: Request{SPMD: true}, spmd: true},
	}
	if n := a.ChipsPerHost(); a.Hosts() == 1 {
		for _, k := range []int{1, 2, 4} {
			if k < n {
				pb, _ := ChipBounds(k)
				modes = append(modes, fidelityMode{name: "TPU_PROCESS_BOUNDS=" + pb.String(), parentPB: pb.String()})
				if k > 1 { // --nprocs 1 is xmp.spawn(nprocs=1), above
					modes = append(modes, fidelityMode{name: "nprocs " + strconv.Itoa(k) + " (subset)", req: Request{NProcs: k}, upPB: pb.String()})
				}
			}
		}
	}
	return modes
}

// TestFidelityToUpstream is issue 14's matrix: for every generation, single and multi-host, default / --spmd /
// --nprocs 1 / subsets, on hosts described by GKE env or by a GCE metadata server, what torch_xla's runtime and
// topology functions, its xla:// rendezvous handler, libtpu's inputs and JAX's cluster detection give inside a
// tpurun worker equals what they give inside xmp.spawn's child on the same host (upstream_model_test.go). Where
// upstream itself fails or the two knowingly differ, the test checks tpurun's documented choice (docs/TOPOLOGY.md).
func TestFidelityToUpstream(t *testing.T) {
	t.Parallel()
	var hosts []fidelityHost
	for _, accel := range []string{"v2-8", "v2-32", "v3-8", "v3-32", "v4-8", "v4-16", "v5litepod-8", "v5litepod-4",
		"v5litepod-16", "v5p-8", "v5p-16", "v6e-8", "v6e-16", "tpu7x-8", "tpu7x-16"} {
		a, err := ParseAcceleratorType(accel)
		must(t, err)
		for _, gke := range []bool{true, false} {
			hosts = append(hosts, fidelityHost{accel: accel, worker: a.Hosts() - 1, gke: gke})
		}
	}
	for _, fh := range hosts {
		a, _ := ParseAcceleratorType(fh.accel)
		for _, mode := range fidelityModes(a) {
			desc := map[bool]string{true: "GKE", false: "GCE"}[fh.gke]
			t.Run(fmt.Sprintf("%s/%s/worker %d/%s", fh.accel, desc, fh.worker, mode.name), func(t *testing.T) {
				t.Parallel()
				checkFidelity(t, fh, mode)
			})
		}
	}
}

func checkFidelity(t *testing.T, fh fidelityHost, mode fidelityMode) {
	a, ft, parent, md, mdURL := fh.setup(t)
	chips := a.ChipsPerHost()
	if mode.parentPB != "" {
		parent["TPU_PROCESS_BOUNDS"] = mode.parentPB
	}
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(parent), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: mdURL}, nil)
	must(t, err)
	plan, err := NewPlan(h, mode.req, World{})
	must(t, err)
	node := SoloNode(h, mode.req)
	local := plan.Local(node)
	if len(local) == 0 {
		t.Fatalf("no worker on node %d of the plan (%d nodes)", node, len(plan.Nodes))
	}

	upParent := parent.clone()
	if mode.upPB != "" {
		upParent["TPU_PROCESS_BOUNDS"] = mode.upPB
	}
	if mode.spmd {
		upParent["XLA_USE_SPMD"] = "1"
	}
	cores := a.Family.ReplicasPerChip
	skipMode := plan.Workers[0].Env["TPU_SKIP_MDS_QUERY"] != ""
	subset := mode.upPB != "" || mode.parentPB != "" || mode.nprocs1

	var jaxCoords []string
	for _, w := range local {
		who := fmt.Sprintf("local rank %d", w.LocalRank)
		tp := tpurunChild(parent, plan, w)
		if err := txImport(tp, md, chips); err != nil {
			t.Fatalf("%s: import torch_xla in the tpurun worker: %v", who, err)
		}
		var up pyEnv
		var upProcs int
		if mode.spmd {
			up, upProcs = upParent.clone(), 1
			err = txImport(up, md, chips)
		} else {
			up, upProcs, err = xmpChild(upParent, md, chips, mode.nprocs1, w.LocalRank)
		}
		if err != nil {
			t.Fatalf("%s: upstream run failed: %v (every case of this matrix runs upstream)", who, err)
		}
		if len(local) != upProcs {
			t.Errorf("%s: tpurun runs %d processes on this host, upstream %d", who, len(local), upProcs)
		}

		// torch_xla's runtime and topology functions, before and after the xla:// handler.
		tpx := tp.clone()
		if err := txXLARendezvous(tpx, md); err != nil {
			t.Fatalf("%s: init_process_group(init_method='xla://') in the tpurun worker: %v", who, err)
		}
		topo := []string{"TPU_VISIBLE_CHIPS", "TPU_CHIPS_PER_PROCESS_BOUNDS", "TPU_PROCESS_BOUNDS", "CLOUD_TPU_TASK_ID",
			"TPU_PROCESS_ADDRESSES", "TPU_PROCESS_PORT", "PJRT_LOCAL_PROCESS_RANK", "PJRT_LOCAL_PROCESS_COUNT"}
		if d := envDiff(tp, tpx, topo...); d != "" {
			t.Errorf("%s: the xla:// handler changed the tpurun worker's topology: %s", who, d)
		}
		for _, e := range []struct {
			name string
			env  pyEnv
		}{{"", tp}, {" after xla://", tpx}} {
			ctx := who + e.name
			tid, err1 := txTaskID(e.env)
			utid, err2 := txTaskID(up)
			if err1 != nil || err2 != nil || tid != utid {
				t.Errorf("%s: task_id() %d (%v), upstream %d (%v)", ctx, tid, err1, utid, err2)
			}
			hi, err1 := txHostIndex(e.env, md)
			uhi, err2 := txHostIndex(up, md)
			if err1 != nil || err2 != nil || hi != uhi {
				t.Errorf("%s: host_index() %d (%v), upstream %d (%v)", ctx, hi, err1, uhi, err2)
			}
			ips, err1 := txWorkerIPs(e.env, md)
			uips, err2 := txWorkerIPs(up, md)
			if fmt.Sprint(ips, err1) != fmt.Sprint(uips, err2) {
				t.Errorf("%s: get_worker_ips() %v (%v), upstream %v (%v)", ctx, ips, err1, uips, err2)
			}
			if n, un := e.env.opt("PJRT_LOCAL_PROCESS_COUNT").or(pyOpt{"1", true}), up.opt("PJRT_LOCAL_PROCESS_COUNT").or(pyOpt{"1", true}); n != un {
				t.Errorf("%s: local_process_count() %s, upstream %s", ctx, n.V, un.V)
			}
			if d := envDiff(e.env, up, "XLA_USE_SPMD", "ALLOW_MULTIPLE_LIBTPU_LOAD"); d != "" {
				t.Errorf("%s: is_spmd / libtpu loading differ: %s", ctx, d)
			}
			if lr, ulr := e.env["PJRT_LOCAL_PROCESS_RANK"], up["PJRT_LOCAL_PROCESS_RANK"]; lr != ulr && !(ulr == "" && lr == "0") {
				t.Errorf("%s: PJRT_LOCAL_PROCESS_RANK %q, upstream %q (local_ordinal)", ctx, lr, ulr)
			}
			compareLibtpu(t, ctx, libtpuSees(e.env, md, chips, cores), libtpuSees(up, md, chips, cores), a, skipMode, subset, len(local))
		}

		// JAX: the same cluster where upstream has one; with a process per chip, the explicit ids of docs/TOPOLOGY.md.
		jc, err1 := jaxInitialize(tp, md, true, nil, nil)
		ujc, err2 := jaxInitialize(up, md, true, nil, nil)
		switch {
		case err2 == nil:
			if err1 != nil || jc.Coordinator != ujc.Coordinator || jc.Processes != ujc.Processes || jc.ID != ujc.ID {
				t.Errorf("%s: jax.distributed.initialize() %+v (%v), upstream %+v", who, jc, err1, ujc)
			}
		case len(local) > 1 || len(plan.Nodes) > 1:
			t.Logf("%s: upstream JAX fails (%v); tpurun's gives %+v (%v)", who, err2, jc, err1)
		}
		if !mode.spmd && !mode.nprocs1 {
			rank, _ := strconv.Atoi(tp["RANK"])
			world, _ := strconv.Atoi(tp["WORLD_SIZE"])
			jc, err := jaxInitialize(tp, md, true, &rank, &world)
			if err != nil || jc.ID != rank || jc.Processes != world {
				t.Errorf("%s: jax.distributed.initialize(process_id=RANK, num_processes=WORLD_SIZE) = %+v, %v", who, jc, err)
			}
			jaxCoords = append(jaxCoords, jc.Coordinator)
		}
	}
	for _, c := range jaxCoords {
		if c != jaxCoords[0] {
			t.Errorf("JAX coordinators differ between local workers: %v", jaxCoords)
			break
		}
	}
}

// compareLibtpu checks that libtpu is handed the same in both processes, allowing only the documented differences:
// tpu7x's core dimension under TPU_SKIP_MDS_QUERY, and the chips-per-host grid of a run on part of a host.
func compareLibtpu(t *testing.T, who string, got, want libtpuView, a Accelerator, skipMode, subset bool, used int) {
	t.Helper()
	if a.Family.Name == "tpu7x" && skipMode && got.ProcessBounds+",2" == want.ProcessBounds {
		got.ProcessBounds = want.ProcessBounds // docs/TOPOLOGY.md "tpu7x": three numbers where the xla:// handler re-parses
	}
	if subset && got.CPHB != want.CPHB {
		if b, err := ParseBounds(got.CPHB); err != nil || b.Product() != used {
			t.Errorf("%s: subset TPU_CHIPS_PER_HOST_BOUNDS %q is not the grid of the chips used", who, got.CPHB)
		}
		got.CPHB = want.CPHB // docs/TOPOLOGY.md "subsets": the subset's grid, as Ray writes it (unverified)
	}
	if got != want {
		t.Errorf("%s: libtpu is handed\n  %+v\nupstream\n  %+v", who, got, want)
	}
}
