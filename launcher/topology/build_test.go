package topology

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// v5e8 detects a v5litepod-8 host (proven single host by sysfs) with env.
func v5e8(t *testing.T, env map[string]string) (*Host, fakeTree) {
	t.Helper()
	ft := newTree(t).tpu(t, "0x0063", 8)
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: refusedURL(t)})
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
		{nprocs: 2, spmd: true, wantErr: "nprocs 2 contradicts SPMD, which runs ONE process per host that sees all local chips (from flag --nprocs, flag --spmd); use 1, leave nprocs unset, or drop --spmd / XLA_USE_SPMD"},
		{nprocs: 1, spmd: true, workers: 1, bounds: "1,1,1"},
		{nprocs: -1, wantErr: "nprocs -1 is negative (from flag --nprocs); leave it unset for one process per device"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("nprocs=%d,spmd=%v", tc.nprocs, tc.spmd), func(t *testing.T) {
			t.Parallel()
			p, err := NewPlan(h, Request{NProcs: tc.nprocs, SPMD: tc.spmd, PortFree: alwaysFree})
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
				if tc.spmd {
					if w.Env["XLA_USE_SPMD"] != "1" || w.Env["TPU_CHIPS_PER_PROCESS_BOUNDS"] != "2,4,1" || w.Env["TPU_VISIBLE_CHIPS"] != "" {
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
			wantErr: []string{"nprocs 8 is more than the 4 v5e chips", "env TPU_NUM_DEVICES", "use 1, 2 or 4"}},
		{name: "TPU_NUM_DEVICES above chips", env: map[string]string{"TPU_NUM_DEVICES": "16"},
			wantErr: []string{"TPU_NUM_DEVICES 16 asks for more chips than the 8 available", "use 1, 2, 4 or 8"}},
		{name: "TPU_NUM_DEVICES not a split", env: map[string]string{"TPU_NUM_DEVICES": "3"},
			wantErr: []string{"3 chips is not a valid subset of a host", "env TPU_NUM_DEVICES"}},
		{name: "parent subset (Ray)", env: map[string]string{"TPU_VISIBLE_CHIPS": "4,5,6,7"}, visible: []string{"4", "5", "6", "7"}},
		{name: "parent subset contradicts", env: map[string]string{"TPU_VISIBLE_CHIPS": "4,5"}, nprocs: 1,
			wantErr: []string{"nprocs 1 contradicts TPU_VISIBLE_CHIPS, which gives this launcher 2 chips", "use 2"}},
		{name: "parent subset off host", env: map[string]string{"TPU_VISIBLE_CHIPS": "8"},
			wantErr: []string{"TPU_VISIBLE_CHIPS \"8\" names chip 8 but this host has 8 chips"}},
		{name: "TPU_PROCESS_BOUNDS agrees", env: map[string]string{"TPU_PROCESS_BOUNDS": "2,2,1"}, nprocs: 4, visible: []string{"0", "1", "2", "3"}},
		{name: "TPU_PROCESS_BOUNDS contradicts", env: map[string]string{"TPU_PROCESS_BOUNDS": "2,2,1"},
			wantErr: []string{"TPU_PROCESS_BOUNDS 2,2,1 has 4 processes but the plan runs 8", "env TPU_PROCESS_BOUNDS"}},
		{name: "XLA_USE_SPMD with nprocs", env: map[string]string{"XLA_USE_SPMD": "1"}, nprocs: 8,
			wantErr: []string{"nprocs 8 contradicts SPMD", "env XLA_USE_SPMD"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ft := newTree(t).tpu(t, "0x0063", 8)
			h, err := Detect(context.Background(), Options{LookupEnv: envOf(tc.env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: refusedURL(t)})
			var p *Plan
			if err == nil {
				p, err = NewPlan(h, Request{NProcs: tc.nprocs, PortFree: alwaysFree})
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
			h, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: md.URL})
			must(t, err)
			if md.total() != 0 {
				t.Fatalf("metadata asked %d times though env describes the slice", md.total())
			}
			p, err := NewPlan(h, Request{PortFree: alwaysFree})
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
					"TPU_WORKER_HOSTNAMES": strings.Join(tc.hosts, ","), "TPU_SKIP_MDS_QUERY": "1",
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
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(nil), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: md.URL})
	must(t, err)
	if h.WorkerID.V != 1 || h.Hostnames.Source.Kind != FromMetadata || strings.Join(h.Hostnames.V, ",") != "10.130.0.2,10.130.0.3" {
		t.Fatalf("host %+v", h)
	}
	if md.count(KeyTPUEnv) != 1 || md.count(KeyEndpoints) != 1 || md.total() != 2 {
		t.Errorf("metadata requests %v, want tpu-env and endpoints once each", md.counts)
	}
	p, err := NewPlan(h, Request{PortFree: alwaysFree})
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
		_, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: refusedURL(t)})
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want a config error", name, err)
		}
	}
	// nprocs on a multi-host slice must be one per chip.
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "0"}),
		SysfsRoot: ft.sys, DevRoot: ft.dev})
	must(t, err)
	if _, err := NewPlan(h, Request{NProcs: 2, PortFree: alwaysFree}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "use 4") {
		t.Errorf("err = %v", err)
	}
}

// TestSlicePlanFromRendezvous: a later rendezvous step rebuilds the env from the agreed node list.
func TestSlicePlanFromRendezvous(t *testing.T) {
	t.Parallel()
	ft := newTree(t).tpu(t, "0x005e", 4)
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16"}), SysfsRoot: ft.sys, DevRoot: ft.dev})
	must(t, err)
	p, err := NewPlan(h, Request{Hosts: []string{"10.0.0.7", "10.0.0.9"}, NodeRank: 1, PortFree: alwaysFree})
	must(t, err)
	w := p.Local(1)[3]
	if w.Rank != 7 || w.Env["TPU_WORKER_ID"] != "1" || w.Env["CLOUD_TPU_TASK_ID"] != "7" ||
		!strings.HasPrefix(w.Env["TPU_PROCESS_ADDRESSES"], "10.0.0.7:8476,") || w.Env["TPU_WORKER_HOSTNAMES"] != "10.0.0.7,10.0.0.9" {
		t.Fatalf("worker %+v", w)
	}
	if _, err := NewPlan(h, Request{Hosts: []string{"a", "b", "c"}, NodeRank: 0}); !errors.Is(err, ErrConfig) {
		t.Errorf("3 hosts for a v4-16: err = %v", err)
	}
}

func TestMegascale(t *testing.T) {
	t.Parallel()
	ft := newTree(t).tpu(t, "0x006f", 8)
	env := map[string]string{"MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.1", "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "1", "MEGASCALE_PORT": "8081"}
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev})
	must(t, err)
	p, err := NewPlan(h, Request{PortFree: alwaysFree})
	must(t, err)
	for k, v := range env {
		if p.Workers[5].Env[k] != v {
			t.Errorf("%s=%q, want %q", k, p.Workers[5].Env[k], v)
		}
	}
}

// TestPorts uses real sockets: a busy port on a single host is replaced; on several hosts it is an error naming the
// pid that holds it.
func TestPorts(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", ":0")
	must(t, err)
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port

	h, _ := v5e8(t, map[string]string{"TPU_NUM_DEVICES": "2"})
	p, err := NewPlan(h, Request{TPUPortBase: busy})
	must(t, err)
	p0, p1 := p.Workers[0].Env["TPU_PROCESS_PORT"], p.Workers[1].Env["TPU_PROCESS_PORT"]
	if p0 == strconv.Itoa(busy) || p1 == strconv.Itoa(busy) || p0 == p1 {
		t.Fatalf("ports %s %s with %d busy", p0, p1, busy)
	}
	if want := "localhost:" + p0 + ",localhost:" + p1; p.Workers[1].Env["TPU_PROCESS_ADDRESSES"] != want {
		t.Errorf("addresses %q, want %q", p.Workers[1].Env["TPU_PROCESS_ADDRESSES"], want)
	}

	ft := newTree(t).tpu(t, "0x005e", 4)
	hm, err := Detect(context.Background(), Options{LookupEnv: envOf(map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "0"}),
		SysfsRoot: ft.sys, DevRoot: ft.dev})
	must(t, err)
	_, err = NewPlan(hm, Request{TPUPortBase: busy})
	var pe *PortBusyError
	if !errors.As(err, &pe) || !errors.Is(err, ErrPortBusy) || pe.Port != busy || pe.LocalRank != 0 || pe.PID != os.Getpid() {
		t.Fatalf("err = %v (%+v), want port %d local rank 0 held by pid %d", err, pe, busy, os.Getpid())
	}
	if !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("message %q", err)
	}
}
