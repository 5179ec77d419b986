package topology

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"tpurun/internal/failure"
)

// v5e8 detects a v5litepod-8 host (proven single host by sysfs) with env.
func v5e8(t *testing.T, env map[string]string) (*Host, fakeTree) {
	t.Helper()
	ft := newTree(t).tpu(t, "0x0063", 8)
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: noMD(t)}, nil)
	must(t, err)
	return h, ft
}

func TestNProcsValidation(t *testing.T) {
	t.Parallel()
	h, ft := v5e8(t, nil)
	sysfs := "sysfs " + ft.sys + "/bus/pci/devices"
	cases := []struct {
		nprocs  int
		spmd    bool
		workers int
		bounds  string
		visible []string
		wantErr string
	}{
		{nprocs: 0, workers: 8, bounds: "2,4,1", visible: []string{"0", "1", "2", "3", "4", "5", "6", "7"}},
		{nprocs: 1, workers: 1, bounds: "1,1,1", visible: []string{"0"}},
		{nprocs: 2, workers: 2, bounds: "1,2,1", visible: []string{"0", "1"}},
		{nprocs: 4, workers: 4, bounds: "2,2,1", visible: []string{"0", "1", "2", "3"}},
		{nprocs: 8, workers: 8, bounds: "2,4,1", visible: []string{"0", "1", "2", "3", "4", "5", "6", "7"}},
		{nprocs: 3, wantErr: "nprocs 3 is not a valid split of the 8 v5e chips on this host (from " + sysfs + "); use 1, 2, 4 or 8, or leave it unset"},
		{nprocs: 6, wantErr: "nprocs 6 is not a valid split of the 8 v5e chips on this host (from " + sysfs + "); use 1, 2, 4 or 8, or leave it unset"},
		{nprocs: 16, wantErr: "nprocs 16 is more than the 8 v5e chips on this host (from " + sysfs + "); use 1, 2, 4 or 8, or leave it unset"},
		{nprocs: 2, spmd: true, wantErr: "nprocs 2 contradicts SPMD, which runs ONE process per host that sees all local chips (from flag --nprocs, flag --spmd); use 1, leave nprocs unset, or turn SPMD off (XLA_USE_SPMD)"},
		{nprocs: 1, spmd: true, workers: 1, bounds: "1,1,1"},
		{nprocs: -1, wantErr: "nprocs -1 is negative (from flag --nprocs); leave it unset for one process per device"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("nprocs=%d,spmd=%v", tc.nprocs, tc.spmd), func(t *testing.T) {
			t.Parallel()
			p, err := NewPlan(h, Request{NProcs: tc.nprocs, SPMD: tc.spmd}, World{})
			if tc.wantErr != "" {
				if !errors.Is(err, ErrConfig) || err.Error() != tc.wantErr {
					t.Fatalf("err =\n  %v\nwant\n  %s", err, tc.wantErr)
				}
				return
			}
			must(t, err)
			if len(p.Workers) != tc.workers {
				t.Fatalf("%d workers, want %d", len(p.Workers), tc.workers)
			}
			for i, w := range p.Workers {
				if w.Env["TPU_PROCESS_BOUNDS"] != tc.bounds {
					t.Errorf("worker %d TPU_PROCESS_BOUNDS=%s, want %s", i, w.Env["TPU_PROCESS_BOUNDS"], tc.bounds)
				}
				if w.Env["TPU_HOST_BOUNDS"] != "1,1,1" {
					t.Errorf("worker %d TPU_HOST_BOUNDS=%s, want 1,1,1", i, w.Env["TPU_HOST_BOUNDS"])
				}
				if want := map[bool]string{true: "2,4,1", false: tc.bounds}[tc.spmd]; w.Env["TPU_CHIPS_PER_HOST_BOUNDS"] != want {
					t.Errorf("worker %d TPU_CHIPS_PER_HOST_BOUNDS=%s, want %s (host bounds x chips-per-host bounds = process bounds)",
						i, w.Env["TPU_CHIPS_PER_HOST_BOUNDS"], want)
				}
				if tc.spmd {
					if w.Env["XLA_USE_SPMD"] != "1" || w.Env["TPU_CHIPS_PER_PROCESS_BOUNDS"] != "2,4,1" || w.Env["TPU_VISIBLE_CHIPS"] != "0,1,2,3,4,5,6,7" {
						t.Errorf("spmd env %v", w.Env)
					}
					continue
				}
				if w.Env["TPU_VISIBLE_CHIPS"] != tc.visible[i] || w.Env["PJRT_LOCAL_PROCESS_COUNT"] != strconv.Itoa(tc.workers) {
					t.Errorf("worker %d env %v", i, w.Env)
				}
				if _, ok := w.Env["XLA_USE_SPMD"]; ok {
					t.Errorf("XLA_USE_SPMD set without SPMD")
				}
			}
		})
	}
}

func TestEnvLimitsAndContradictions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		env     map[string]string
		nprocs  int
		visible []string // per worker TPU_VISIBLE_CHIPS
		wantErr []string // substrings
	}{
		{name: "TPU_NUM_DEVICES limits", env: map[string]string{"TPU_NUM_DEVICES": "4"}, visible: []string{"0", "1", "2", "3"}},
		{name: "TPU_NUM_DEVICES agrees", env: map[string]string{"TPU_NUM_DEVICES": "2"}, nprocs: 2, visible: []string{"0", "1"}},
		{name: "TPU_NUM_DEVICES contradicts", env: map[string]string{"TPU_NUM_DEVICES": "4"}, nprocs: 2,
			wantErr: []string{"nprocs 2 contradicts TPU_NUM_DEVICES, which gives this launcher 4 chips", "flag --nprocs", "env TPU_NUM_DEVICES", "use 4"}},
		{name: "TPU_NUM_DEVICES below nprocs", env: map[string]string{"TPU_NUM_DEVICES": "4"}, nprocs: 8,
			wantErr: []string{"nprocs 8 contradicts TPU_NUM_DEVICES, which gives this launcher 4 chips (from flag --nprocs, env TPU_NUM_DEVICES); use 4, or leave nprocs unset, or change TPU_NUM_DEVICES"}},
		// The usable count is what TPU_NUM_DEVICES leaves of TPU_VISIBLE_CHIPS: nprocs is compared with it once.
		{name: "TPU_NUM_DEVICES limits TPU_VISIBLE_CHIPS, nprocs agrees", env: map[string]string{"TPU_NUM_DEVICES": "2", "TPU_VISIBLE_CHIPS": "1,2,3"},
			nprocs: 2, visible: []string{"1", "2"}},
		{name: "TPU_NUM_DEVICES limits TPU_VISIBLE_CHIPS, nprocs unset", env: map[string]string{"TPU_NUM_DEVICES": "2", "TPU_VISIBLE_CHIPS": "1,2,3"},
			visible: []string{"1", "2"}},
		{name: "TPU_NUM_DEVICES limits TPU_VISIBLE_CHIPS, nprocs contradicts", env: map[string]string{"TPU_NUM_DEVICES": "2", "TPU_VISIBLE_CHIPS": "1,2,3"}, nprocs: 1,
			wantErr: []string{"nprocs 1 contradicts TPU_NUM_DEVICES, which gives this launcher 2 chips (from flag --nprocs, env TPU_NUM_DEVICES, env TPU_VISIBLE_CHIPS); use 2, or leave nprocs unset, or change TPU_NUM_DEVICES"}},
		{name: "TPU_NUM_DEVICES above chips", env: map[string]string{"TPU_NUM_DEVICES": "16"},
			wantErr: []string{"TPU_NUM_DEVICES 16 asks for more chips than the 8 available", "use 1, 2, 4 or 8"}},
		{name: "TPU_NUM_DEVICES not a split", env: map[string]string{"TPU_NUM_DEVICES": "3"},
			wantErr: []string{"3 usable chips is not a valid subset of this 8-chip host (from env TPU_NUM_DEVICES); use 1, 2, 4 or 8, e.g. TPU_VISIBLE_CHIPS=0,1 or TPU_NUM_DEVICES=2"}},
		{name: "TPU_VISIBLE_CHIPS not a split", env: map[string]string{"TPU_VISIBLE_CHIPS": "5,6,7"},
			wantErr: []string{"3 usable chips is not a valid subset of this 8-chip host (from env TPU_VISIBLE_CHIPS); use 1, 2, 4 or 8, e.g. TPU_VISIBLE_CHIPS=5,6 or TPU_NUM_DEVICES=2"}},
		{name: "TPU_VISIBLE_CHIPS not a split, nprocs set", env: map[string]string{"TPU_VISIBLE_CHIPS": "5,6,7"}, nprocs: 2,
			wantErr: []string{"3 usable chips is not a valid subset of this 8-chip host (from env TPU_VISIBLE_CHIPS); use 1, 2, 4 or 8, e.g. TPU_VISIBLE_CHIPS=5,6 or TPU_NUM_DEVICES=2"}},
		{name: "parent subset (Ray)", env: map[string]string{"TPU_VISIBLE_CHIPS": "4,5,6,7"}, visible: []string{"4", "5", "6", "7"}},
		{name: "parent subset contradicts", env: map[string]string{"TPU_VISIBLE_CHIPS": "4,5"}, nprocs: 1,
			wantErr: []string{"nprocs 1 contradicts TPU_VISIBLE_CHIPS, which gives this launcher 2 chips", "use 2"}},
		{name: "parent subset off host", env: map[string]string{"TPU_VISIBLE_CHIPS": "8"},
			wantErr: []string{"TPU_VISIBLE_CHIPS \"8\" names chip 8 but this host has 8 chips"}},
		{name: "TPU_PROCESS_BOUNDS agrees", env: map[string]string{"TPU_PROCESS_BOUNDS": "2,2,1"}, nprocs: 4, visible: []string{"0", "1", "2", "3"}},
		// torch_xla's num_local_processes is min(local chips, size of TPU_PROCESS_BOUNDS): a smaller grid without
		// nprocs runs that many processes.
		{name: "TPU_PROCESS_BOUNDS smaller gives the process count", env: map[string]string{"TPU_PROCESS_BOUNDS": "2,2,1"}, visible: []string{"0", "1", "2", "3"}},
		{name: "TPU_PROCESS_BOUNDS of one process", env: map[string]string{"TPU_PROCESS_BOUNDS": "1,1,1"}, visible: []string{"0"}},
		{name: "TPU_PROCESS_BOUNDS not a split", env: map[string]string{"TPU_PROCESS_BOUNDS": "3,1,1"},
			wantErr: []string{"TPU_PROCESS_BOUNDS 3,1,1 asks for 3 processes, which is not a valid split of the 8 v5e chips on this host (from env TPU_PROCESS_BOUNDS, sysfs ", "use 1,1,1, 1,2,1, 2,2,1 or 2,4,1, or unset it"}},
		{name: "TPU_PROCESS_BOUNDS larger than the chips", env: map[string]string{"TPU_PROCESS_BOUNDS": "4,4,1"},
			wantErr: []string{"TPU_PROCESS_BOUNDS 4,4,1 has 16 processes but the plan runs 8", "env TPU_PROCESS_BOUNDS"}},
		{name: "TPU_PROCESS_BOUNDS against TPU_NUM_DEVICES", env: map[string]string{"TPU_PROCESS_BOUNDS": "2,2,1", "TPU_NUM_DEVICES": "8"},
			wantErr: []string{"TPU_PROCESS_BOUNDS 2,2,1 asks for 4 processes but TPU_NUM_DEVICES gives this launcher 8 chips (from env TPU_PROCESS_BOUNDS, env TPU_NUM_DEVICES)"}},
		{name: "TPU_PROCESS_BOUNDS against nprocs", env: map[string]string{"TPU_PROCESS_BOUNDS": "2,2,1"}, nprocs: 2,
			wantErr: []string{"TPU_PROCESS_BOUNDS 2,2,1 has 4 processes but the plan runs 2"}},
		{name: "XLA_USE_SPMD with nprocs", env: map[string]string{"XLA_USE_SPMD": "1"}, nprocs: 8,
			wantErr: []string{"nprocs 8 contradicts SPMD", "env XLA_USE_SPMD"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ft := newTree(t).tpu(t, "0x0063", 8)
			h, err := Detect(context.Background(), Options{LookupEnv: envOf(tc.env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: noMD(t)}, nil)
			var p *Plan
			if err == nil {
				p, err = NewPlan(h, Request{NProcs: tc.nprocs}, World{})
			}
			if tc.wantErr != nil {
				if !errors.Is(err, ErrConfig) {
					t.Fatalf("err = %v, want a config error", err)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("message %q lacks %q", err, s)
					}
				}
				return
			}
			must(t, err)
			if len(p.Workers) != len(tc.visible) {
				t.Fatalf("%d workers, want %d", len(p.Workers), len(tc.visible))
			}
			for i, w := range p.Workers {
				if w.Env["TPU_VISIBLE_CHIPS"] != tc.visible[i] {
					t.Errorf("worker %d TPU_VISIBLE_CHIPS=%q, want %q", i, w.Env["TPU_VISIBLE_CHIPS"], tc.visible[i])
				}
			}
		})
	}
}

// TestMultiHostWorkedExample reproduces TPU_FACTS.md's v4-16 example exactly, and checks the other slices.
func TestMultiHost(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, id, accel string
		hosts           []string
		node            int
		idVar           string
		hostBounds      string
		procBounds      string
		cphb            string
	}{
		{"v4-16", "0x005e", "v4-16", []string{"ip0", "ip1"}, 1, "TPU_WORKER_ID", "1,1,2", "2,2,2", "2,2,1"},
		{"v4-32", "0x005e", "v4-32", []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}, 2, "TPU_WORKER_ID", "1,1,4", "2,2,4", "2,2,1"},
		{"v5litepod-16", "0x0063", "v5litepod-16", []string{"h0", "h1", "h2", "h3"}, 3, "TPU_WORKER_ID", "2,2,1", "4,4,1", "2,2,1"},
		{"v6e-16 JobSet", "0x006f", "v6e-16", []string{"job-0.svc", "job-1.svc", "job-2.svc", "job-3.svc"}, 0, "JOB_COMPLETION_INDEX", "2,2,1", "4,4,1", "2,2,1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ft := newTree(t).tpu(t, tc.id, 4)
			md := newMD(t, nil, nil)
			env := map[string]string{"TPU_ACCELERATOR_TYPE": tc.accel, "TPU_WORKER_HOSTNAMES": strings.Join(tc.hosts, ","), tc.idVar: strconv.Itoa(tc.node)}
			h, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: md.URL}, nil)
			must(t, err)
			if md.total() != 0 {
				t.Fatalf("metadata asked %d times though env describes the slice", md.total())
			}
			p, err := NewPlan(h, Request{}, World{})
			must(t, err)
			if len(p.Nodes) != len(tc.hosts) || len(p.Workers) != 4*len(tc.hosts) {
				t.Fatalf("nodes %d workers %d", len(p.Nodes), len(p.Workers))
			}
			var addrs []string
			for _, host := range tc.hosts {
				for lr := 0; lr < 4; lr++ {
					addrs = append(addrs, host+":"+strconv.Itoa(8476+lr))
				}
			}
			for _, w := range p.Workers {
				if w.Rank != w.NodeRank*4+w.LocalRank || len(w.Replicas) != 1 || w.Replicas[0] != w.Rank {
					t.Errorf("worker %+v", w)
				}
				want := map[string]string{
					"PJRT_DEVICE": "TPU", "PJRT_LOCAL_PROCESS_RANK": strconv.Itoa(w.LocalRank), "PJRT_LOCAL_PROCESS_COUNT": "4",
					"TPU_VISIBLE_CHIPS": strconv.Itoa(w.LocalRank), "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
					"TPU_PROCESS_BOUNDS": tc.procBounds, "TPU_PROCESS_PORT": strconv.Itoa(8476 + w.LocalRank),
					"TPU_PROCESS_ADDRESSES": strings.Join(addrs, ","), "CLOUD_TPU_TASK_ID": strconv.Itoa(w.Rank),
					"ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "TPU_ACCELERATOR_TYPE": tc.accel, "TPU_HOST_BOUNDS": tc.hostBounds,
					"TPU_CHIPS_PER_HOST_BOUNDS": tc.cphb, "TPU_WORKER_ID": strconv.Itoa(w.NodeRank),
					"TPU_WORKER_HOSTNAMES": strings.Join(tc.hosts, ","), "TPU_SKIP_MDS_QUERY": "true",
				}
				diffEnv(t, fmt.Sprintf("rank %d", w.Rank), w.Env, want)
			}
			if tc.name == "v4-16" {
				// The worked example, verbatim.
				w := p.Local(1)[0]
				example := map[string]string{"TPU_PROCESS_BOUNDS": "2,2,2", "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1", "CLOUD_TPU_TASK_ID": "4",
					"TPU_VISIBLE_CHIPS": "0", "TPU_PROCESS_PORT": "8476",
					"TPU_PROCESS_ADDRESSES": "ip0:8476,ip0:8477,ip0:8478,ip0:8479,ip1:8476,ip1:8477,ip1:8478,ip1:8479"}
				for k, v := range example {
					if w.Env[k] != v {
						t.Errorf("worked example: %s=%q, want %q", k, w.Env[k], v)
					}
				}
			}
		})
	}
}

func TestMultiHostFromMetadata(t *testing.T) {
	t.Parallel()
	ft := newTree(t).tpu(t, "0x005e", 4)
	md := newMD(t, map[string]string{
		KeyTPUEnv:    "ACCELERATOR_TYPE: 'v4-16'\nWORKER_ID: '1'\nHOST_BOUNDS: '1,1,2'\nCHIPS_PER_HOST_BOUNDS: '2,2,1'\nZONE: 'us-central2-b'\n",
		KeyEndpoints: "t1k-w-0:8470:10.130.0.2,t1k-w-1:8470:10.130.0.3",
	}, nil)
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(nil), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: md.URL}, nil)
	must(t, err)
	if h.tpu().WorkerID.V != 1 || h.tpu().Hostnames.Source.Kind != FromMetadata || strings.Join(h.tpu().Hostnames.V, ",") != "10.130.0.2,10.130.0.3" {
		t.Fatalf("host %+v", h)
	}
	if md.count(KeyTPUEnv) != 1 || md.count(KeyEndpoints) != 1 || md.total() != 2 {
		t.Errorf("metadata requests %v, want tpu-env and endpoints once each", md.counts)
	}
	p, err := NewPlan(h, Request{}, World{})
	must(t, err)
	if got := p.Local(1)[0].Env["CLOUD_TPU_TASK_ID"]; got != "4" || len(p.Workers) != 8 {
		t.Errorf("CLOUD_TPU_TASK_ID %s, %d workers", got, len(p.Workers))
	}
	if md.total() != 2 {
		t.Errorf("planning asked the metadata server again: %v", md.counts)
	}
}

func TestMultiHostMismatch(t *testing.T) {
	t.Parallel()
	ft := newTree(t).tpu(t, "0x005e", 4)
	for name, env := range map[string]map[string]string{
		"too few hosts":  {"TPU_ACCELERATOR_TYPE": "v4-32", "TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "0"},
		"id off the end": {"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "2"},
		"no id":          {"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a,b"},
		"wrong family":   {"TPU_ACCELERATOR_TYPE": "v5p-8"},
		"wrong count":    {"TPU_ACCELERATOR_TYPE": "v6e-8"},
	} {
		_, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: refusedURL(t)}, nil)
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want a config error", name, err)
		}
	}
	// nprocs on a multi-host slice must be one per chip.
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "0"}),
		SysfsRoot: ft.sys, DevRoot: ft.dev}, nil)
	must(t, err)
	if _, err := NewPlan(h, Request{NProcs: 2}, World{}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "use 4") {
		t.Errorf("err = %v", err)
	}
}

// TestSlicePlanFromRendezvous: a later rendezvous step rebuilds the env from the agreed node list.
func TestSlicePlanFromRendezvous(t *testing.T) {
	t.Parallel()
	ft := newTree(t).tpu(t, "0x005e", 4)
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16"}), SysfsRoot: ft.sys, DevRoot: ft.dev}, nil)
	must(t, err)
	p, err := NewPlan(h, Request{Hosts: []string{"10.0.0.7", "10.0.0.9"}, NodeRank: 1}, World{})
	must(t, err)
	w := p.Local(1)[3]
	if w.Rank != 7 || w.Env["TPU_WORKER_ID"] != "1" || w.Env["CLOUD_TPU_TASK_ID"] != "7" ||
		!strings.HasPrefix(w.Env["TPU_PROCESS_ADDRESSES"], "10.0.0.7:8476,") || w.Env["TPU_WORKER_HOSTNAMES"] != "10.0.0.7,10.0.0.9" {
		t.Fatalf("worker %+v", w)
	}
	if _, err := NewPlan(h, Request{Hosts: []string{"a", "b", "c"}, NodeRank: 0}, World{}); !errors.Is(err, ErrConfig) {
		t.Errorf("3 hosts for a v4-16: err = %v", err)
	}
}

func TestMegascale(t *testing.T) {
	t.Parallel()
	ft := newTree(t).tpu(t, "0x006f", 8)
	env := map[string]string{"MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.1", "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "1", "MEGASCALE_PORT": "8081"}
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: noMD(t)}, nil)
	must(t, err)
	p, err := NewPlan(h, Request{}, World{})
	must(t, err)
	for k, v := range env {
		if p.Workers[5].Env[k] != v {
			t.Errorf("%s=%q, want %q", k, p.Workers[5].Env[k], v)
		}
	}
}

// TestPorts uses real sockets: planning never binds (the plan keeps base + local rank even with the base busy);
// the pre-start check moves a busy port on a single host, and on several hosts refuses it naming the holder's pid.
func TestPorts(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", ":0")
	must(t, err)
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port

	h, _ := v5e8(t, map[string]string{"TPU_NUM_DEVICES": "2"})
	p, err := NewPlan(h, Request{TPUPortBase: busy}, World{})
	must(t, err)
	if got := p.Workers[0].Env["TPU_PROCESS_PORT"]; got != strconv.Itoa(busy) {
		t.Fatalf("planned port %s, want the base %d: planning must not probe sockets", got, busy)
	}
	must(t, p.CheckPorts(0, "/proc", nil))
	p0, p1 := p.Workers[0].Env["TPU_PROCESS_PORT"], p.Workers[1].Env["TPU_PROCESS_PORT"]
	if p0 == strconv.Itoa(busy) || p1 == strconv.Itoa(busy) || p0 == p1 {
		t.Fatalf("ports %s %s with %d busy", p0, p1, busy)
	}
	if want := "localhost:" + p0 + ",localhost:" + p1; p.Workers[1].Env["TPU_PROCESS_ADDRESSES"] != want {
		t.Errorf("addresses %q, want %q", p.Workers[1].Env["TPU_PROCESS_ADDRESSES"], want)
	}

	ft := newTree(t).tpu(t, "0x005e", 4)
	hm, err := Detect(context.Background(), Options{LookupEnv: envOf(map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "0"}),
		SysfsRoot: ft.sys, DevRoot: ft.dev}, nil)
	must(t, err)
	pm, err := NewPlan(hm, Request{TPUPortBase: busy}, World{})
	must(t, err)
	err = pm.CheckPorts(0, "/proc", nil)
	var pe *PortBusyError
	if !errors.As(err, &pe) || !errors.Is(err, ErrPortBusy) || pe.Port != busy || pe.LocalRank != 0 || pe.PID != os.Getpid() {
		t.Fatalf("err = %v (%+v), want port %d local rank 0 held by pid %d", err, pe, busy, os.Getpid())
	}
	if !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("message %q", err)
	}
}

// TestSubsetBoundsAgree: a run on a subset of the host's chips (nprocs, TPU_NUM_DEVICES, TPU_VISIBLE_CHIPS, SPMD on
// a parent's subset) describes the subset in TPU_CHIPS_PER_HOST_BOUNDS, so that TPU_PROCESS_BOUNDS = TPU_HOST_BOUNDS
// x TPU_CHIPS_PER_HOST_BOUNDS holds, and TPU_CHIPS_PER_PROCESS_BOUNDS of SPMD matches it.
func TestSubsetBoundsAgree(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		env           map[string]string
		nprocs        int
		spmd          bool
		host, cphb    string
		process, cpp  string
		visibleWorker string // worker 0's TPU_VISIBLE_CHIPS
	}{
		{"whole host", nil, 0, false, "1,1,1", "2,4,1", "2,4,1", "1,1,1", "0"},
		{"nprocs 4 of 8", nil, 4, false, "1,1,1", "2,2,1", "2,2,1", "1,1,1", "0"},
		{"TPU_NUM_DEVICES=2", map[string]string{"TPU_NUM_DEVICES": "2"}, 0, false, "1,1,1", "1,2,1", "1,2,1", "1,1,1", "0"},
		{"TPU_VISIBLE_CHIPS=3", map[string]string{"TPU_VISIBLE_CHIPS": "3"}, 0, false, "1,1,1", "1,1,1", "1,1,1", "1,1,1", "3"},
		{"SPMD on TPU_VISIBLE_CHIPS=4,5,6,7", map[string]string{"TPU_VISIBLE_CHIPS": "4,5,6,7"}, 0, true, "1,1,1", "2,2,1", "1,1,1", "2,2,1", "4,5,6,7"},
		{"SPMD on the whole host", nil, 0, true, "1,1,1", "2,4,1", "1,1,1", "2,4,1", "0,1,2,3,4,5,6,7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, _ := v5e8(t, tc.env)
			p, err := NewPlan(h, Request{NProcs: tc.nprocs, SPMD: tc.spmd}, World{})
			must(t, err)
			env := p.Workers[0].Env
			for k, want := range map[string]string{"TPU_HOST_BOUNDS": tc.host, "TPU_CHIPS_PER_HOST_BOUNDS": tc.cphb,
				"TPU_PROCESS_BOUNDS": tc.process, "TPU_CHIPS_PER_PROCESS_BOUNDS": tc.cpp, "TPU_VISIBLE_CHIPS": tc.visibleWorker} {
				if env[k] != want {
					t.Errorf("%s=%q, want %q", k, env[k], want)
				}
			}
			if tc.spmd {
				return
			}
			hb, err := ParseBounds(env["TPU_HOST_BOUNDS"])
			must(t, err)
			cb, err := ParseBounds(env["TPU_CHIPS_PER_HOST_BOUNDS"])
			must(t, err)
			if got := hb.Mul(cb).String(); got != env["TPU_PROCESS_BOUNDS"] {
				t.Errorf("host bounds x chips-per-host bounds = %s, but TPU_PROCESS_BOUNDS=%s", got, env["TPU_PROCESS_BOUNDS"])
			}
		})
	}
}

// TestProcessBoundsGeneration7: TPU_PROCESS_BOUNDS on tpu7x. torch_xla's configure_topology appends a core
// dimension ",2" for generation 7, and its xla:// handler re-parses TPU_PROCESS_BOUNDS as exactly three numbers when
// TPU_SKIP_MDS_QUERY is set (tpu.py MeshShape.from_string). So tpurun writes three numbers under
// TPU_SKIP_MDS_QUERY and the core dimension where workers read the metadata server (docs/TOPOLOGY.md; which one
// libtpu prefers is unverified). A given grid counts processes by its first three numbers on tpu7x only.
func TestProcessBoundsGeneration7(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, id, accel, bounds string
		metadata                bool // the slice comes from a complete metadata server, not env
		nprocs                  int
		wantBounds              string // every worker's TPU_PROCESS_BOUNDS
		wantErr                 string
	}{
		{name: "tpu7x-8 as torch_xla writes it, env-described", id: "0x0076", accel: "tpu7x-8", bounds: "2,2,1,2", wantBounds: "2,2,1"},
		{name: "tpu7x-8 without the core dimension", id: "0x0076", accel: "tpu7x-8", bounds: "2,2,1", wantBounds: "2,2,1"},
		{name: "tpu7x-8 nprocs 4", id: "0x0076", accel: "tpu7x-8", bounds: "2,2,1,2", nprocs: 4, wantBounds: "2,2,1"},
		{name: "tpu7x-8 from metadata", id: "0x0076", accel: "tpu7x-8", metadata: true, wantBounds: "2,2,1,2"},
		{name: "tpu7x-8 from metadata, given as torch_xla writes it", id: "0x0076", accel: "tpu7x-8", bounds: "2,2,1,2", metadata: true, wantBounds: "2,2,1,2"},
		{name: "tpu7x-8 from metadata, given without the core dimension", id: "0x0076", accel: "tpu7x-8", bounds: "2,2,1", metadata: true, wantBounds: "2,2,1"},
		{name: "tpu7x-8 from metadata, nprocs 2", id: "0x0076", accel: "tpu7x-8", metadata: true, nprocs: 2, wantBounds: "1,2,1"},
		{name: "tpu7x-8 nprocs 2", id: "0x0076", accel: "tpu7x-8", bounds: "2,2,1,2", nprocs: 2,
			wantErr: "TPU_PROCESS_BOUNDS 2,2,1,2 has 4 processes (the trailing core dimension of tpu7x not counted) but the plan runs 2 (2 per host on 1 hosts)"},
		{name: "tpu7x-8 a fourth number other than 2", id: "0x0076", accel: "tpu7x-8", bounds: "2,2,1,4",
			wantErr: "TPU_PROCESS_BOUNDS 2,2,1,4 has 4 numbers; only tpu7x takes a fourth (its core dimension, 2)"},
		{name: "v4-8 takes no fourth number", id: "0x005e", accel: "v4-8", bounds: "2,2,1,2",
			wantErr: "TPU_PROCESS_BOUNDS 2,2,1,2 has 4 numbers; only tpu7x takes a fourth (its core dimension, 2)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ft := newTree(t).tpu(t, tc.id, 4)
			env := map[string]string{"TPU_ACCELERATOR_TYPE": tc.accel}
			md := newMD(t, nil, nil)
			if tc.metadata {
				env = map[string]string{}
				md = newMD(t, map[string]string{KeyTPUEnv: tpuEnvBody(tc.accel, 0)}, nil)
			}
			if tc.bounds != "" {
				env["TPU_PROCESS_BOUNDS"] = tc.bounds
			}
			h, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: md.URL}, nil)
			must(t, err)
			p, err := NewPlan(h, Request{NProcs: tc.nprocs}, World{})
			if tc.wantErr != "" {
				if !errors.Is(err, ErrConfig) || !strings.HasPrefix(fmt.Sprint(err), tc.wantErr) {
					t.Fatalf("err =\n  %v\nwant prefix\n  %s", err, tc.wantErr)
				}
				return
			}
			must(t, err)
			want := 4
			if tc.nprocs > 0 {
				want = tc.nprocs
			}
			if len(p.Workers) != want {
				t.Fatalf("%d workers, want %d", len(p.Workers), want)
			}
			for _, w := range p.Workers {
				if w.Env["TPU_PROCESS_BOUNDS"] != tc.wantBounds {
					t.Errorf("rank %d TPU_PROCESS_BOUNDS=%q, want %q", w.Rank, w.Env["TPU_PROCESS_BOUNDS"], tc.wantBounds)
				}
			}
			// A nested launch handed this value back accepts it.
			env["TPU_PROCESS_BOUNDS"] = tc.wantBounds
			h2, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: md.URL}, nil)
			must(t, err)
			p2, err := NewPlan(h2, Request{NProcs: tc.nprocs}, World{})
			must(t, err)
			if got := p2.Workers[0].Env["TPU_PROCESS_BOUNDS"]; got != tc.wantBounds {
				t.Errorf("nested TPU_PROCESS_BOUNDS=%q, want %q", got, tc.wantBounds)
			}
		})
	}
}

// TestRaySubsetBounds: a process given a subset of a host describes the subset as its host, as Ray does for an
// actor holding 1 or 2 chips (TPU_VISIBLE_CHIPS with TPU_CHIPS_PER_HOST_BOUNDS 1,1,1 or 1,2,1 and TPU_HOST_BOUNDS
// 1,1,1) and as tpurun's own --nprocs 1 worker env does: planned on the visible chips, by default and with SPMD;
// bounds that describe neither the host nor the subset are still refused, naming both.
func TestRaySubsetBounds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		visible  string
		cphb     string
		spmd     bool
		workers  []string // each worker's TPU_VISIBLE_CHIPS
		process  string   // TPU_PROCESS_BOUNDS
		cpp      string   // TPU_CHIPS_PER_PROCESS_BOUNDS
		wantErrs []string
	}{
		{name: "1 chip", visible: "3", cphb: "1,1,1", workers: []string{"3"}, process: "1,1,1", cpp: "1,1,1"},
		{name: "1 chip spmd", visible: "3", cphb: "1,1,1", spmd: true, workers: []string{"3"}, process: "1,1,1", cpp: "1,1,1"},
		{name: "2 chips", visible: "2,3", cphb: "1,2,1", workers: []string{"2", "3"}, process: "1,2,1", cpp: "1,1,1"},
		{name: "2 chips spmd", visible: "2,3", cphb: "1,2,1", spmd: true, workers: []string{"2,3"}, process: "1,1,1", cpp: "1,2,1"},
		{name: "the host's bounds on a subset", visible: "2,3", cphb: "2,4,1", workers: []string{"2", "3"}, process: "1,2,1", cpp: "1,1,1"},
		{name: "bounds of neither", visible: "2,3", cphb: "1,1,1", wantErrs: []string{
			"TPU_CHIPS_PER_HOST_BOUNDS 1,1,1 describes 1 chips per host but this host has 8 and TPU_VISIBLE_CHIPS gives this launcher 2",
			"env TPU_VISIBLE_CHIPS", "fix or unset TPU_CHIPS_PER_HOST_BOUNDS"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ft := newTree(t).tpu(t, "0x0063", 8)
			env := map[string]string{"TPU_VISIBLE_CHIPS": tc.visible, "TPU_CHIPS_PER_HOST_BOUNDS": tc.cphb, "TPU_HOST_BOUNDS": "1,1,1"}
			h, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: noMD(t)}, nil)
			if len(tc.wantErrs) > 0 {
				if err == nil {
					t.Fatal("Detect accepted the bounds")
				}
				for _, want := range tc.wantErrs {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q\nlacks %q", err, want)
					}
				}
				return
			}
			must(t, err)
			p, err := NewPlan(h, Request{SPMD: tc.spmd}, World{})
			must(t, err)
			if len(p.Workers) != len(tc.workers) {
				t.Fatalf("%d workers, want %d", len(p.Workers), len(tc.workers))
			}
			subset := map[string]string{"3": "1,1,1", "2,3": "1,2,1"}[tc.visible] // the subset's chip grid
			for i, w := range p.Workers {
				for k, want := range map[string]string{"TPU_VISIBLE_CHIPS": tc.workers[i], "TPU_HOST_BOUNDS": "1,1,1",
					"TPU_CHIPS_PER_HOST_BOUNDS": subset, "TPU_PROCESS_BOUNDS": tc.process, "TPU_CHIPS_PER_PROCESS_BOUNDS": tc.cpp} {
					if w.Env[k] != want {
						t.Errorf("worker %d: %s=%q, want %q", i, k, w.Env[k], want)
					}
				}
			}
		})
	}
}

// TestWorldPlanCPU: 3 agreed nodes of 2 CPU workers each give ranks n*2+l, one replica per rank, every rank's env
// is the host plan's env (a copy, not shared), and a multi-slice world sets MEGASCALE_* from the agreed nodes.
func TestWorldPlanCPU(t *testing.T) {
	h, err := Detect(context.Background(), Options{Device: "cpu", LookupEnv: envOf(nil), SysfsRoot: t.TempDir(), DevRoot: t.TempDir()}, nil)
	must(t, err)
	w := World{NodeRank: 1, NumSlices: 3, MegascaleCoordinator: "h0:8081", MegascalePort: 8081}
	for i, name := range []string{"a", "b", "c"} {
		w.Nodes = append(w.Nodes, WorldNode{Host: name, Addr: "10.0.0." + string(rune('1'+i)), LocalWorkers: 2, SliceID: i})
	}
	p, err := NewPlan(h, Request{NProcs: 2}, w)
	must(t, err)
	if len(p.Nodes) != 3 || len(p.Workers) != 6 || p.Nodes[2].Host != "10.0.0.3" {
		t.Fatalf("%d nodes %d workers (%+v), want 3 and 6", len(p.Nodes), len(p.Workers), p.Nodes)
	}
	for i, wk := range p.Workers {
		if wk.Rank != i || wk.NodeRank != i/2 || wk.LocalRank != i%2 || !slices.Equal(wk.Replicas, []int{i}) {
			t.Fatalf("worker %d: %+v", i, wk)
		}
		if wk.Env["PJRT_LOCAL_PROCESS_RANK"] != string(rune('0'+i%2)) {
			t.Fatalf("worker %d env %v", i, wk.Env)
		}
	}
	p.Workers[0].Env["X"] = "1"
	if _, shared := p.Workers[2].Env["X"]; shared {
		t.Fatal("node 1's env map is node 0's")
	}
	if e := p.Workers[5].Env; e["MEGASCALE_SLICE_ID"] != "2" || e["MEGASCALE_NUM_SLICES"] != "3" || e["MEGASCALE_COORDINATOR_ADDRESS"] != "h0" || e["MEGASCALE_PORT"] != "8081" {
		t.Fatalf("rank 5 megascale env: %v", e)
	}
	if _, err := NewPlan(h, Request{NProcs: 2}, World{Nodes: w.Nodes, NodeRank: 3}); err == nil {
		t.Fatal("node rank 3 of 3 nodes was accepted")
	}
}

// TestWorldPlanUnevenNodes: nodes with different worker counts get consecutive global ranks (torchrun's
// assignment), not node*k+local.
func TestWorldPlanUnevenNodes(t *testing.T) {
	h, err := Detect(context.Background(), Options{Device: "cpu", LookupEnv: envOf(nil), SysfsRoot: t.TempDir(), DevRoot: t.TempDir()}, nil)
	must(t, err)
	w := World{NodeRank: 1, Nodes: []WorldNode{{Host: "a", LocalWorkers: 3}, {Host: "b", LocalWorkers: 1}, {Host: "c", LocalWorkers: 2}}}
	p, err := NewPlan(h, Request{NProcs: 1}, w)
	must(t, err)
	var ranks []int
	for _, wk := range p.Local(2) {
		ranks = append(ranks, wk.Rank)
	}
	if len(p.Workers) != 6 || !slices.Equal(ranks, []int{4, 5}) || p.Local(1)[0].Rank != 3 {
		t.Fatalf("workers %+v", p.Workers)
	}
}

// TestSpreadGivesEveryNodeTheSplit: a ready plan (made by hand, not detected) spread over an agreed world gives
// every node its agreed number of workers with consecutive global ranks and the split (env) of the plan's node;
// the zero World is the plan itself.
func TestSpreadGivesEveryNodeTheSplit(t *testing.T) {
	p, err := CPUPlan(2)
	if err != nil {
		t.Fatal(err)
	}
	p.Workers[1].Env["MARK"] = "second"
	if got := p.Spread(0, World{}); got != p {
		t.Fatal("the zero World is not the plan itself")
	}
	w := World{NodeRank: 1, Nodes: []WorldNode{{Host: "a", Addr: "10.0.0.1", LocalWorkers: 2}, {Host: "b", Addr: "10.0.0.2", LocalWorkers: 3}}}
	got := p.Spread(0, w)
	if len(got.Workers) != 5 || len(got.Nodes) != 2 || got.Nodes[1].Host != "10.0.0.2" {
		t.Fatalf("spread over 2+3 workers: %d workers, nodes %+v", len(got.Workers), got.Nodes)
	}
	for i, wk := range got.Workers {
		node, lr := 0, i
		if i >= 2 {
			node, lr = 1, i-2
		}
		if wk.Rank != i || wk.NodeRank != node || wk.LocalRank != lr || len(wk.Replicas) != 1 || wk.Replicas[0] != i {
			t.Errorf("worker %d: %+v", i, wk)
		}
		if want := map[int]string{1: "second"}[lr]; wk.Env["MARK"] != want {
			t.Errorf("worker %d (local rank %d): MARK=%q, want %q (its local rank's env in the plan)", i, lr, wk.Env["MARK"], want)
		}
	}
	got.Workers[1].Env["MARK"] = "changed"
	if p.Workers[1].Env["MARK"] != "second" {
		t.Error("the spread plan shares its env maps with the ready plan")
	}
}

// v4Host is one v4 host (4 chips) whose environment is env, detected without a metadata server.
func v4Host(t *testing.T, env map[string]string) *Host {
	t.Helper()
	ft := newTree(t).tpu(t, "0x005e", 4)
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: noMD(t)}, nil)
	must(t, err)
	return h
}

// TestJobLayoutIsOneWorldOverEverySlice: every host of a slice, and of every slice of a multislice job, derives the
// same world from its own environment: nodes = hosts per slice x slices, node rank = slice x hosts + worker id,
// node 0 the coordinator's host (a host:port coordinator counts by its host).
func TestJobLayoutIsOneWorldOverEverySlice(t *testing.T) {
	slice := map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a0,a1", "TPU_WORKER_ID": "1", "TPU_SKIP_MDS_QUERY": "true"}
	l, err := v4Host(t, slice).JobLayout(Request{})
	must(t, err)
	if l == nil || l.NNodes() != 2 || l.NodeRank() != 1 || l.Coordinator != "a0" || l.Self() != "a1" || l.Slices != 1 {
		t.Fatalf("one slice: %+v", l)
	}
	multi := map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "b0,b1", "TPU_WORKER_ID": "1", "TPU_SKIP_MDS_QUERY": "true",
		"MEGASCALE_NUM_SLICES": "3", "MEGASCALE_SLICE_ID": "2", "MEGASCALE_COORDINATOR_ADDRESS": "a0.js:8080"}
	l, err = v4Host(t, multi).JobLayout(Request{})
	must(t, err)
	if l.NNodes() != 6 || l.NodeRank() != 5 || l.Coordinator != "a0.js" || l.Self() != "b1" || !strings.Contains(l.String(), "slice 2 of 3") {
		t.Fatalf("multislice: %+v (%s)", l, l)
	}
	w := l.World(4, 8081)
	if len(w.Nodes) != 6 || w.NodeRank != 5 || w.Nodes[4].Addr != "b0" || w.Nodes[5].SliceID != 2 || w.Nodes[0].Addr == "a0" || w.NumSlices != 3 {
		t.Fatalf("world %+v: this slice named by its list, the others by slice and worker", w)
	}
	if l.String() != "worker 1 of 2 (env TPU_WORKER_HOSTNAMES) in slice 2 of 3" {
		t.Fatalf("the layout says %q", l)
	}
	p, err := NewPlan(v4Host(t, multi), Request{}, w)
	must(t, err)
	local := p.Local(5)
	if len(p.Workers) != 24 || len(local) != 4 || local[0].Rank != 20 {
		t.Fatalf("the job's plan: %d workers, node 5 has %d from rank %d", len(p.Workers), len(local), local[0].Rank)
	}
	if e := local[0].Env; e["MEGASCALE_COORDINATOR_ADDRESS"] != "a0.js:8080" || e["TPU_WORKER_ID"] != "1" || e["TPU_WORKER_HOSTNAMES"] != "b0,b1" ||
		e["MEGASCALE_SLICE_ID"] != "2" || e["CLOUD_TPU_TASK_ID"] != "4" {
		t.Fatalf("node 5's first worker: the coordinator as inherited, the TPU env per slice: %v", e)
	}
}

// TestJobLayoutOnlyWhereTheHostIsOneOfSeveral: a host alone in its slice, a one-chip run (xmp.spawn(nprocs=1)), and
// a host that is not a TPU describe no job to join.
func TestJobLayoutOnlyWhereTheHostIsOneOfSeveral(t *testing.T) {
	for name, tc := range map[string]struct {
		env map[string]string
		req Request
	}{
		"single-host slice":  {map[string]string{"TPU_ACCELERATOR_TYPE": "v4-8"}, Request{}},
		"listed alone":       {map[string]string{"TPU_ACCELERATOR_TYPE": "v4-8", "TPU_WORKER_HOSTNAMES": "a0", "TPU_WORKER_ID": "0"}, Request{}},
		"one chip of a pod":  {map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a0,a1", "TPU_WORKER_ID": "1"}, Request{NProcs: 1}},
		"one slice of one":   {map[string]string{"TPU_ACCELERATOR_TYPE": "v4-8", "MEGASCALE_NUM_SLICES": "1"}, Request{}},
		"no MEGASCALE slice": {map[string]string{"TPU_ACCELERATOR_TYPE": "v4-8", "MEGASCALE_SLICE_ID": "1"}, Request{}},
	} {
		l, err := v4Host(t, tc.env).JobLayout(tc.req)
		if l != nil || err != nil {
			t.Errorf("%s: layout %+v, error %v; want none", name, l, err)
		}
	}
	cpu, err := Detect(context.Background(), Options{Device: "cpu", LookupEnv: envOf(map[string]string{"TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "0"}),
		SysfsRoot: t.TempDir(), DevRoot: t.TempDir()}, nil)
	must(t, err)
	if l, err := cpu.JobLayout(Request{}); l != nil || err != nil {
		t.Errorf("a CPU host: layout %+v, error %v; want none (a batch scheduler's list does not mean every host runs tpurun)", l, err)
	}
	// two one-host slices: a job of two nodes, though no slice lists its hosts
	l, err := v4Host(t, map[string]string{"TPU_ACCELERATOR_TYPE": "v4-8", "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "1",
		"MEGASCALE_COORDINATOR_ADDRESS": "c0"}).JobLayout(Request{})
	must(t, err)
	if l == nil || l.NNodes() != 2 || l.NodeRank() != 1 || l.Self() != "" {
		t.Fatalf("two one-host slices: %+v", l)
	}
}

// TestJobLayoutRefusesWhatCannotBeMadeConsistent: each refusal names the variable that is missing or wrong, so
// every host of the job fails before anything starts instead of waiting for a coordinator nobody names.
func TestJobLayoutRefusesWhatCannotBeMadeConsistent(t *testing.T) {
	base := func(kv ...string) map[string]string {
		m := map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a0,a1", "TPU_WORKER_ID": "0"}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	for _, tc := range []struct {
		env  map[string]string
		name failure.Setting
	}{
		{base("MEGASCALE_NUM_SLICES", "2", "MEGASCALE_SLICE_ID", "1"), "MEGASCALE_COORDINATOR_ADDRESS"},
		{base("MEGASCALE_NUM_SLICES", "2", "MEGASCALE_COORDINATOR_ADDRESS", "a0"), "MEGASCALE_SLICE_ID"},
		{base("MEGASCALE_NUM_SLICES", "2", "MEGASCALE_SLICE_ID", "2", "MEGASCALE_COORDINATOR_ADDRESS", "a0"), "MEGASCALE_SLICE_ID"},
	} {
		_, err := v4Host(t, tc.env).JobLayout(Request{})
		var ce *failure.ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.name || !errors.Is(err, ErrConfig) {
			t.Errorf("env %v: %v; want a *ConfigError naming %s", tc.env, err, tc.name)
		}
	}
}

// TestAloneIsAOneHostSlice: one host of a v4-16 slice run on purpose alone is planned as a v4-8 of its own: one
// node, host bounds 1,1,1, no host list, worker 0.
func TestAloneIsAOneHostSlice(t *testing.T) {
	h := v4Host(t, map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a0,a1", "TPU_WORKER_ID": "1",
		"MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "0", "MEGASCALE_COORDINATOR_ADDRESS": "a0"}).Alone()
	if l, err := h.JobLayout(Request{}); l != nil || err != nil {
		t.Fatalf("alone, the host still describes a job: %+v %v", l, err)
	}
	p, err := NewPlan(h, Request{}, World{})
	must(t, err)
	e := p.Workers[3].Env
	if len(p.Nodes) != 1 || len(p.Workers) != 4 || e["TPU_ACCELERATOR_TYPE"] != "v4-8" || e["TPU_HOST_BOUNDS"] != "1,1,1" ||
		e["TPU_WORKER_ID"] != "0" || e["TPU_WORKER_HOSTNAMES"] != "" || e["MEGASCALE_NUM_SLICES"] != "" {
		t.Fatalf("alone: %d nodes, %d workers, rank 3's env %v", len(p.Nodes), len(p.Workers), e)
	}
	if !slices.Contains(JobEnv(), "TPU_WORKER_HOSTNAMES") || !slices.Contains(JobEnv(), "MEGASCALE_COORDINATOR_ADDRESS") {
		t.Fatalf("JobEnv %v leaves the job's variables to the workers", JobEnv())
	}
}
