package topology

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"tpurun/internal/failure"
)

// TestGivenBoundsContradictingTheHost: host or chips-per-host bounds from env or metadata that contradict the hosts
// and chips found are refused naming both sources, not handed to the workers next to a process grid that
// disagrees with them (issue 14: TPU_HOST_BOUNDS=2,1,1 on a single-host v5litepod-8).
func TestGivenBoundsContradictingTheHost(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		id   string
		n    int
		env  map[string]string
		md   map[string]string
		want []string
	}{
		{name: "TPU_HOST_BOUNDS on a single host", id: "0x0063", n: 8, env: map[string]string{"TPU_HOST_BOUNDS": "2,1,1"},
			want: []string{"TPU_HOST_BOUNDS 2,1,1 describes 2 hosts but v5litepod-8 has 1 (from env TPU_HOST_BOUNDS; derived from sysfs "}},
		{name: "TPU_CHIPS_PER_HOST_BOUNDS against the chips", id: "0x0063", n: 8, env: map[string]string{"TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1"},
			want: []string{"TPU_CHIPS_PER_HOST_BOUNDS 2,2,1 describes 4 chips per host but this host has 8 (from env TPU_CHIPS_PER_HOST_BOUNDS, sysfs "}},
		{name: "TPU_HOST_BOUNDS against the host list", id: "0x005e", n: 4,
			env:  map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "0", "TPU_HOST_BOUNDS": "1,1,4"},
			want: []string{"TPU_HOST_BOUNDS 1,1,4 describes 4 hosts but TPU_WORKER_HOSTNAMES has 2 (from env TPU_HOST_BOUNDS, env TPU_WORKER_HOSTNAMES)"}},
		{name: "TPU_HOST_BOUNDS of four numbers", id: "0x005e", n: 4, env: map[string]string{"TPU_HOST_BOUNDS": "1,1,1,1"},
			want: []string{"TPU_HOST_BOUNDS \"1,1,1,1\" is malformed (from env TPU_HOST_BOUNDS): bounds \"1,1,1,1\" has 4 numbers; a host grid has 3"}},
		{name: "metadata CHIPS_PER_HOST_BOUNDS against the chips", id: "0x005e", n: 4,
			md:   map[string]string{KeyTPUEnv: "ACCELERATOR_TYPE: 'v4-8'\nCHIPS_PER_HOST_BOUNDS: '2,1,1'\nWORKER_ID: '0'\n"},
			want: []string{"describes 2 chips per host but this host has 4 (from metadata ", "/tpu-env, sysfs "}},
		{name: "metadata accelerator type against the chips", id: "0x0063", n: 4,
			md:   map[string]string{KeyTPUEnv: "ACCELERATOR_TYPE: 'v4-8'\nWORKER_ID: '0'\n"},
			want: []string{"accelerator type v4-8 contradicts the 4 v5litepod chips on this host (from metadata ", "/tpu-env, sysfs "}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ft := newTree(t).tpu(t, tc.id, tc.n)
			_, err := Detect(context.Background(), Options{LookupEnv: envOf(tc.env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: newMD(t, tc.md, nil).URL}, nil)
			var ce *failure.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *ConfigError", err)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("message\n  %v\nlacks\n  %s", err, s)
				}
			}
		})
	}
	// Host bounds against a rendezvous that agreed on another number of hosts.
	ft := newTree(t).tpu(t, "0x005e", 4)
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_HOST_BOUNDS": "1,1,2"}),
		SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: noMD(t)}, nil)
	must(t, err)
	if _, err := NewPlan(h, Request{Hosts: []string{"a", "b", "c", "d"}}, World{}); !errors.Is(err, ErrConfig) {
		t.Errorf("4 agreed hosts for TPU_HOST_BOUNDS=1,1,2: err = %v", err)
	}
}

// TestHostnameOnlyEndpoints: worker-network-endpoints in the newer format (host names alone, as JAX reads them) is
// accepted; torch_xla's get_worker_ips cannot read it, so the workers get the host list in env.
func TestHostnameOnlyEndpoints(t *testing.T) {
	t.Parallel()
	ft := newTree(t).tpu(t, "0x005e", 4)
	md := newMD(t, map[string]string{KeyTPUEnv: tpuEnvBody("v4-16", 1), KeyEndpoints: "t1v-n-w-0,t1v-n-w-1"}, nil)
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(nil), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: md.URL}, nil)
	must(t, err)
	if !h.tpu().HostnameEndpoints || h.tpu().TorchXLAMetadata || strings.Join(h.tpu().Hostnames.V, ",") != "t1v-n-w-0,t1v-n-w-1" {
		t.Fatalf("hosts %v, hostname endpoints %v, torch_xla may read metadata %v", h.tpu().Hostnames.V, h.tpu().HostnameEndpoints, h.tpu().TorchXLAMetadata)
	}
	p, err := NewPlan(h, Request{}, World{})
	must(t, err)
	e := p.Local(1)[0].Env
	if e["TPU_SKIP_MDS_QUERY"] != "true" || e["TPU_WORKER_HOSTNAMES"] != "t1v-n-w-0,t1v-n-w-1" || !strings.HasPrefix(e["TPU_PROCESS_ADDRESSES"], "t1v-n-w-0:8476,") {
		t.Fatalf("env %v", e)
	}
	for _, bad := range []string{"a:b", "a:b:c:d", "w:1:", "w:1: ", ",", "a,,b"} {
		if _, _, err := parseEndpoints(bad); !errors.Is(err, ErrParse) {
			t.Errorf("parseEndpoints(%q) = %v, want a parse error", bad, err)
		}
	}
}

// TestWorkerMetadataMode: the workers read the slice from the same place tpurun did. The parent's
// TPU_SKIP_MDS_QUERY is kept as given; a complete metadata server is left to them (no TPU_SKIP_MDS_QUERY), unless a
// rendezvous agreed on other hosts; otherwise tpurun hands the slice in env with TPU_SKIP_MDS_QUERY=true, or, when
// it cannot name the accelerator type torch_xla's version() needs, leaves it unset.
func TestWorkerMetadataMode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		id    string
		n     int
		env   map[string]string
		md    map[string]string
		req   Request
		want  string // TPU_SKIP_MDS_QUERY of the workers; "-" = unset
		accel string // TPU_ACCELERATOR_TYPE of the workers; "" = unset
	}{
		{name: "parent true", id: "0x0063", n: 4, env: map[string]string{"TPU_SKIP_MDS_QUERY": "true"}, want: "true", accel: "v5litepod-4"},
		{name: "parent 0 skips too", id: "0x0063", n: 4, env: map[string]string{"TPU_SKIP_MDS_QUERY": "0"}, want: "0", accel: "v5litepod-4"},
		{name: "parent empty does not", id: "0x0063", n: 4, env: map[string]string{"TPU_SKIP_MDS_QUERY": ""},
			md: map[string]string{KeyTPUEnv: tpuEnvBody("v5litepod-4", 0)}, want: "-", accel: "v5litepod-4"},
		{name: "complete metadata", id: "0x005e", n: 4, md: map[string]string{KeyTPUEnv: tpuEnvBody("v4-8", 0)}, want: "-", accel: "v4-8"},
		{name: "metadata without WORKER_ID", id: "0x005e", n: 4, md: map[string]string{KeyTPUEnv: "ACCELERATOR_TYPE: 'v4-8'\nTPU_PROCESS_BOUNDS: '1,1,1'\nTPU_CHIPS_PER_PROCESS_BOUNDS: '2,2,1'\n"},
			want: "true", accel: "v4-8"},
		{name: "metadata 404 on v4-8", id: "0x005e", n: 4, md: map[string]string{}, want: "true", accel: "v4-8"},
		{name: "metadata 404 on v3-8", id: "0x0027", n: 4, md: map[string]string{}, want: "-", accel: ""},
		{name: "v3-8 named by env", id: "0x0027", n: 4, env: map[string]string{"TPU_ACCELERATOR_TYPE": "v3-8"}, want: "true", accel: "v3-8"},
		{name: "a rendezvous in another order", id: "0x005e", n: 4, md: gceSlice("v4-16", 1), req: Request{Hosts: []string{"10.130.0.3", "10.130.0.2"}, NodeRank: 0},
			want: "true", accel: "v4-16"},
		{name: "a rendezvous in the metadata order", id: "0x005e", n: 4, md: gceSlice("v4-16", 1), req: Request{Hosts: []string{"h0", "h1"}, NodeRank: 1},
			want: "-", accel: "v4-16"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ft := newTree(t).tpu(t, tc.id, tc.n)
			h, err := Detect(context.Background(), Options{LookupEnv: envOf(tc.env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: newMD(t, tc.md, nil).URL}, nil)
			must(t, err)
			p, err := NewPlan(h, tc.req, World{})
			must(t, err)
			for _, w := range p.Workers {
				skip, ok := w.Env["TPU_SKIP_MDS_QUERY"]
				if !ok {
					skip = "-"
				}
				if skip != tc.want || w.Env["TPU_ACCELERATOR_TYPE"] != tc.accel {
					t.Fatalf("rank %d: TPU_SKIP_MDS_QUERY %q, TPU_ACCELERATOR_TYPE %q; want %q, %q", w.Rank, skip, w.Env["TPU_ACCELERATOR_TYPE"], tc.want, tc.accel)
				}
			}
		})
	}
}

// gceSlice is the metadata of host worker of a GCE slice accel (tpu-env, endpoints name:uid:ip, worker number).
func gceSlice(accel string, worker int) map[string]string {
	a, _ := ParseAcceleratorType(accel)
	var eps []string
	for i := 0; i < a.Hosts(); i++ {
		eps = append(eps, "t1v-n-w-"+string(rune('0'+i))+":8470:10.130.0."+string(rune('2'+i)))
	}
	return map[string]string{KeyTPUEnv: tpuEnvBody(accel, worker), KeyEndpoints: strings.Join(eps, ","), KeyWorkerNumber: string(rune('0' + worker))}
}

// TestMetadata404OnV3: a v3-8 whose metadata server answers 404 (issue 14) plans from sysfs; without a known
// accelerator type the workers get no TPU_SKIP_MDS_QUERY, so `import torch_xla` fails in them exactly as in
// xmp.spawn's (it asks the metadata server), never in version() on a missing TPU_ACCELERATOR_TYPE; once env names
// the type, the workers import it where xmp.spawn would not start.
func TestMetadata404OnV3(t *testing.T) {
	t.Parallel()
	ft := newTree(t).tpu(t, "0x0027", 4)
	for _, env := range []map[string]string{nil, {"TPU_ACCELERATOR_TYPE": "v3-8"}} {
		h, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: noMD(t)}, nil)
		must(t, err)
		p, err := NewPlan(h, Request{}, World{})
		must(t, err)
		md := gceMetadata{} // 404 for every key
		child := tpurunChild(pyEnv(env), p, p.Workers[0])
		got := txImport(child, md, 4)
		_, _, up := xmpChild(pyEnv(env), md, 4, false, 0)
		if env == nil {
			var pe *pyError
			if !errors.As(got, &pe) || pe.Type != "OSError" || got.Error() != fmt.Sprint(up) {
				t.Errorf("import torch_xla in the worker: %v; in xmp.spawn: %v; want the same OSError", got, up)
			}
			continue
		}
		if got != nil {
			t.Errorf("TPU_ACCELERATOR_TYPE=v3-8: import torch_xla in the worker: %v", got)
		}
	}
}

// TestOneChipRun: --nprocs 1 is xmp.spawn(nprocs=1)'s one-chip run, on a single host and on one host of a
// multi-host slice (where tpurun refused it before): one worker, node 0 of its plan, chip 0, TPU_PROCESS_BOUNDS
// 1,1,1 (also on tpu7x), no task id, no process addresses; the slice description is the host's.
func TestOneChipRun(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, id string
		env      map[string]string
		wid      string
		hosts    string // TPU_WORKER_HOSTNAMES of the worker; "" = unset
		solo     int    // SoloNode, the default request's node
	}{
		{name: "v5litepod-8", id: "0x0063", env: map[string]string{"TPU_ACCELERATOR_TYPE": "v5litepod-8"}, wid: "0"},
		{name: "tpu7x-8", id: "0x0076", env: map[string]string{"TPU_ACCELERATOR_TYPE": "tpu7x-8"}, wid: "0"},
		{name: "host 1 of v4-16", id: "0x005e", env: map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "1"},
			wid: "1", hosts: "a,b", solo: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := 4
			if tc.id == "0x0063" {
				n = 8
			}
			ft := newTree(t).tpu(t, tc.id, n)
			h, err := Detect(context.Background(), Options{LookupEnv: envOf(tc.env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: noMD(t)}, nil)
			must(t, err)
			req := Request{NProcs: 1}
			p, err := NewPlan(h, req, World{})
			must(t, err)
			if len(p.Workers) != 1 || len(p.Nodes) != 1 || SoloNode(h, req) != 0 || len(p.Local(SoloNode(h, req))) != 1 || SoloNode(h, Request{}) != tc.solo {
				t.Fatalf("plan %+v, node %d, default node %d", p, SoloNode(h, req), SoloNode(h, Request{}))
			}
			e := p.Workers[0].Env
			for _, k := range []string{"CLOUD_TPU_TASK_ID", "TPU_PROCESS_ADDRESSES", "TPU_PROCESS_PORT"} {
				if v, ok := e[k]; ok {
					t.Errorf("%s=%q set on a one-chip run", k, v)
				}
			}
			if e["TPU_VISIBLE_CHIPS"] != "0" || e["TPU_PROCESS_BOUNDS"] != "1,1,1" || e["TPU_CHIPS_PER_PROCESS_BOUNDS"] != "1,1,1" ||
				e["TPU_WORKER_ID"] != tc.wid || e["TPU_WORKER_HOSTNAMES"] != tc.hosts || e["PJRT_LOCAL_PROCESS_COUNT"] != "1" {
				t.Errorf("env %v", e)
			}
			if got := p.Workers[0].Replicas; len(got) != 1 || got[0] != 0 {
				t.Errorf("replicas %v, want [0]: xmp.spawn(nprocs=1) calls fn once", got)
			}
		})
	}
}

// TestSingleNamedHost: one host named in TPU_WORKER_HOSTNAMES (GKE single-host) gets localhost process addresses,
// as torch_xla's get_worker_ips gives for any single host, and the pre-start check moves a busy port there.
func TestSingleNamedHost(t *testing.T) {
	t.Parallel()
	ft := newTree(t).tpu(t, "0x006f", 4)
	env := map[string]string{"TPU_SKIP_MDS_QUERY": "true", "TPU_ACCELERATOR_TYPE": "v6e-4", "TPU_WORKER_ID": "0", "TPU_WORKER_HOSTNAMES": "tpu-job-0-0.tpu-job"}
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: noMD(t)}, nil)
	must(t, err)
	p, err := NewPlan(h, Request{}, World{})
	must(t, err)
	want := "localhost:8476,localhost:8477,localhost:8478,localhost:8479"
	if got := p.Workers[2].Env["TPU_PROCESS_ADDRESSES"]; got != want {
		t.Fatalf("TPU_PROCESS_ADDRESSES %q, want %q", got, want)
	}
	if _, ok := p.Workers[0].Env["TPU_WORKER_HOSTNAMES"]; ok {
		t.Errorf("a single host's plan sets TPU_WORKER_HOSTNAMES (the parent's value is the launcher's to keep)")
	}
	busy := func(port int) bool { return port != 8477 } // free(port): 8477 is busy; it moves past the block, to 8481
	must(t, p.CheckPorts(0, "/proc", busy))
	if got := p.Workers[0].Env["TPU_PROCESS_ADDRESSES"]; got != "localhost:8476,localhost:8481,localhost:8478,localhost:8479" || p.Workers[1].Env["TPU_PROCESS_PORT"] != "8481" {
		t.Errorf("after moving 8477: TPU_PROCESS_ADDRESSES %q, rank 1's port %s", got, p.Workers[1].Env["TPU_PROCESS_PORT"])
	}
}

// TestSetJAXCoordinator: CPU and GPU workers get JAX_COORDINATOR_ADDRESS; TPU workers are left to JAX's cloud-TPU
// detection.
func TestSetJAXCoordinator(t *testing.T) {
	t.Parallel()
	cpu, err := CPUPlan(2)
	must(t, err)
	cpu.SetJAXCoordinator("10.0.0.1:8482")
	for _, w := range cpu.Workers {
		if w.Env[EnvJAXCoordinator] != "10.0.0.1:8482" {
			t.Errorf("cpu rank %d: %v", w.Rank, w.Env)
		}
	}
	h, _ := v5e8(t, nil)
	tp, err := NewPlan(h, Request{}, World{})
	must(t, err)
	tp.SetJAXCoordinator("10.0.0.1:8482")
	if _, ok := tp.Workers[0].Env[EnvJAXCoordinator]; ok {
		t.Errorf("a TPU worker got %s", EnvJAXCoordinator)
	}
}
