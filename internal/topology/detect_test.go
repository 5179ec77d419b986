package topology

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"tpurun/internal/failure"
)

// TestDetectAndPlanSingleHost is the table of the issue: fake sysfs/dev trees for every generation.
func TestDetectAndPlanSingleHost(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		id          string
		chips       int
		env         map[string]string
		md          map[string]string // metadata answers (a key without one is 404); nil = the server must not be asked at all
		wantType    string
		wantWorkers int
		wantRepl    int // replicas per worker
		wantBounds  string
		wantCPHB    string
		wantMDKeys  map[string]int
		wantSkip    string // the workers' TPU_SKIP_MDS_QUERY; "" = unset (they read the metadata server)
	}{
		{name: "v2-8", id: "0x0027", chips: 4, env: map[string]string{"TPU_ACCELERATOR_TYPE": "v2-8"},
			wantType: "v2-8", wantWorkers: 4, wantRepl: 2, wantBounds: "2,2,1", wantCPHB: "2,2,1", wantSkip: "true"},
		{name: "v3-8 from metadata", id: "0x0027", chips: 4, md: map[string]string{KeyTPUEnv: "ACCELERATOR_TYPE: 'v3-8'\nWORKER_ID: '0'\nZONE: 'us-central1-a'\n"},
			wantType: "v3-8", wantWorkers: 4, wantRepl: 2, wantBounds: "2,2,1", wantCPHB: "2,2,1", wantMDKeys: map[string]int{KeyTPUEnv: 1}},
		{name: "v4-8 from metadata without process bounds", id: "0x005e", chips: 4, md: map[string]string{KeyTPUEnv: "ACCELERATOR_TYPE: 'v4-8'\nHOST_BOUNDS: '1,1,1'\nWORKER_ID: '0'\n"},
			wantType: "v4-8", wantWorkers: 4, wantRepl: 1, wantBounds: "2,2,1", wantCPHB: "2,2,1", wantMDKeys: map[string]int{KeyTPUEnv: 1}, wantSkip: "true"},
		{name: "v4-8 from metadata", id: "0x005e", chips: 4, md: map[string]string{KeyTPUEnv: tpuEnvBody("v4-8", 0)},
			wantType: "v4-8", wantWorkers: 4, wantRepl: 1, wantBounds: "2,2,1", wantCPHB: "2,2,1", wantMDKeys: map[string]int{KeyTPUEnv: 1}},
		{name: "v5litepod-4 skip mds", id: "0x0063", chips: 4, env: map[string]string{"TPU_SKIP_MDS_QUERY": "1"},
			wantType: "v5litepod-4", wantWorkers: 4, wantRepl: 1, wantBounds: "2,2,1", wantCPHB: "2,2,1", wantSkip: "1"},
		{name: "v5litepod-8 metadata 404", id: "0x0063", chips: 8, md: map[string]string{},
			wantType: "v5litepod-8", wantWorkers: 8, wantRepl: 1, wantBounds: "2,4,1", wantCPHB: "2,4,1", wantMDKeys: map[string]int{KeyTPUEnv: 1}, wantSkip: "true"},
		{name: "v5p-8", id: "0x0062", chips: 4, env: map[string]string{"TPU_ACCELERATOR_TYPE": "v5p-8"},
			wantType: "v5p-8", wantWorkers: 4, wantRepl: 1, wantBounds: "2,2,1", wantCPHB: "2,2,1", wantSkip: "true"},
		{name: "v6e-1", id: "0x006f", chips: 1, md: map[string]string{KeyTPUEnv: tpuEnvBody("v6e-1", 0)},
			wantType: "v6e-1", wantWorkers: 1, wantRepl: 1, wantBounds: "1,1,1", wantCPHB: "1,1,1", wantMDKeys: map[string]int{KeyTPUEnv: 1}},
		{name: "v6e-4 accelerator-type key", id: "0x006f", chips: 4, md: map[string]string{KeyTPUEnv: "ZONE: 'x'\n", KeyAcceleratorType: "v6e-4"},
			wantType: "v6e-4", wantWorkers: 4, wantRepl: 1, wantBounds: "2,2,1", wantCPHB: "2,2,1", wantMDKeys: map[string]int{KeyTPUEnv: 1, KeyAcceleratorType: 1}, wantSkip: "true"},
		{name: "v6e-8", id: "0x006f", chips: 8, md: map[string]string{KeyTPUEnv: tpuEnvBody("v6e-8", 0)},
			wantType: "v6e-8", wantWorkers: 8, wantRepl: 1, wantBounds: "2,4,1", wantCPHB: "2,4,1", wantMDKeys: map[string]int{KeyTPUEnv: 1}},
		// tpu7x: three numbers under TPU_SKIP_MDS_QUERY (the xla:// handler re-parses them), the core dimension
		// ",2" as xmp.spawn writes it where workers read the metadata server.
		{name: "tpu7x-8", id: "0x0076", chips: 4, env: map[string]string{"TPU_ACCELERATOR_TYPE": "tpu7x-8"},
			wantType: "tpu7x-8", wantWorkers: 4, wantRepl: 2, wantBounds: "2,2,1", wantCPHB: "2,2,1", wantSkip: "true"},
		{name: "tpu7x-8 from metadata", id: "0x0076", chips: 4, md: map[string]string{KeyTPUEnv: tpuEnvBody("tpu7x-8", 0)},
			wantType: "tpu7x-8", wantWorkers: 4, wantRepl: 2, wantBounds: "2,2,1,2", wantCPHB: "2,2,1", wantMDKeys: map[string]int{KeyTPUEnv: 1}},
		{name: "unknown id with type from env", id: "0x0099", chips: 4, env: map[string]string{"TPU_ACCELERATOR_TYPE": "v6e-4"},
			wantType: "v6e-4", wantWorkers: 4, wantRepl: 1, wantBounds: "2,2,1", wantCPHB: "2,2,1", wantSkip: "true"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ft := newTree(t).tpu(t, tc.id, tc.chips)
			md := newMD(t, tc.md, nil)
			env := tc.env
			if env == nil {
				env = map[string]string{}
			}
			h, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: md.URL}, nil)
			if err != nil {
				t.Fatalf("Detect: %v", err)
			}
			if h.Device.V != TPU || h.tpu().Accelerator.V.Type != tc.wantType {
				t.Fatalf("device %s accelerator %q (%s), want tpu %q", h.Device.V, h.tpu().Accelerator.V.Type, h.tpu().Accelerator.Source, tc.wantType)
			}
			if tc.md == nil && md.total() != 0 {
				t.Fatalf("metadata asked %d times, want 0: %v", md.total(), md.counts)
			}
			for k, n := range tc.wantMDKeys {
				if got := md.count(k); got != n {
					t.Errorf("metadata key %s asked %d times, want %d", k, got, n)
				}
			}
			if got := md.total(); tc.md != nil && got != len(tc.wantMDKeys) {
				t.Errorf("metadata asked %d times in all (%v), want %d", got, md.counts, len(tc.wantMDKeys))
			}
			p, err := NewPlan(h, Request{}, World{})
			if err != nil {
				t.Fatalf("NewPlan: %v", err)
			}
			if len(p.Workers) != tc.wantWorkers || len(p.Nodes) != 1 || p.Nodes[0].LocalWorkers != tc.wantWorkers {
				t.Fatalf("plan has %d workers, nodes %+v; want %d", len(p.Workers), p.Nodes, tc.wantWorkers)
			}
			var addrs []string
			for i := 0; i < tc.wantWorkers; i++ {
				addrs = append(addrs, "localhost:"+strconv.Itoa(8476+i))
			}
			seen := map[int]bool{}
			for i, w := range p.Workers {
				if w.Rank != i || w.LocalRank != i || w.NodeRank != 0 {
					t.Errorf("worker %d: rank %d local %d node %d", i, w.Rank, w.LocalRank, w.NodeRank)
				}
				if len(w.Replicas) != tc.wantRepl {
					t.Errorf("worker %d replicas %v, want %d", i, w.Replicas, tc.wantRepl)
				}
				for _, r := range w.Replicas {
					if seen[r] {
						t.Errorf("replica %d owned twice", r)
					}
					seen[r] = true
				}
				want := map[string]string{
					"PJRT_DEVICE": "TPU", "PJRT_LOCAL_PROCESS_RANK": strconv.Itoa(i), "PJRT_LOCAL_PROCESS_COUNT": strconv.Itoa(tc.wantWorkers),
					"TPU_VISIBLE_CHIPS": strconv.Itoa(i), "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1", "TPU_PROCESS_BOUNDS": tc.wantBounds,
					"TPU_PROCESS_PORT": strconv.Itoa(8476 + i), "TPU_PROCESS_ADDRESSES": strings.Join(addrs, ","),
					"CLOUD_TPU_TASK_ID": strconv.Itoa(i), "TPU_ACCELERATOR_TYPE": tc.wantType, "TPU_HOST_BOUNDS": "1,1,1",
					"TPU_CHIPS_PER_HOST_BOUNDS": tc.wantCPHB, "TPU_WORKER_ID": "0",
				}
				if tc.wantSkip != "" {
					want["TPU_SKIP_MDS_QUERY"] = tc.wantSkip
				}
				if tc.wantWorkers > 1 {
					want["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
				}
				diffEnv(t, "worker "+strconv.Itoa(i), w.Env, want)
			}
			if len(seen) != tc.wantWorkers*tc.wantRepl {
				t.Errorf("%d replicas, want %d", len(seen), tc.wantWorkers*tc.wantRepl)
			}
		})
	}
}

func diffEnv(t *testing.T, who string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s=%q, want %q", who, k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %s=%q", who, k, v)
		}
	}
}

func TestUnknownDeviceID(t *testing.T) {
	t.Parallel()
	ft := newTree(t).tpu(t, "0x0099", 4)
	md := newMD(t, nil, nil)
	_, err := Detect(context.Background(), Options{LookupEnv: envOf(nil), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: md.URL}, nil)
	var ue *UnknownDeviceError
	if !errors.Is(err, ErrUnknownDevice) || !errors.Is(err, ErrConfig) || !errors.As(err, &ue) || ue.Count != 4 {
		t.Fatalf("err = %v, want an UnknownDeviceError for 4 devices", err)
	}
	if !strings.Contains(err.Error(), "found 4 Google PCI devices with unknown device id 0x0099") ||
		!strings.Contains(err.Error(), "set TPU_ACCELERATOR_TYPE or upgrade") {
		t.Errorf("message %q", err)
	}
	if md.total() != 0 {
		t.Errorf("metadata asked %d times", md.total())
	}
}

func TestDetectAutoPicksDevice(t *testing.T) {
	t.Parallel()
	gpuTree := func(t *testing.T) fakeTree {
		ft := newTree(t).pci(t, vendorNVIDIA, "0x2330", "0x030200", 2, "nvidia")
		ft.pci(t, vendorNVIDIA, "0x22a3", "0x040300", 2, "") // audio functions of the same cards: not GPUs
		return ft
	}
	cases := []struct {
		name string
		tree func(t *testing.T) fakeTree
		opts Options
		env  map[string]string
		want Device
		kind SourceKind
	}{
		{"tpu beats gpu", func(t *testing.T) fakeTree { return gpuTree(t).tpu(t, "0x006f", 8) }, Options{}, nil, TPU, FromSysfs},
		{"gpu", gpuTree, Options{}, nil, GPU, FromSysfs},
		{"cpu default", newTree, Options{}, nil, CPU, FromDefault},
		{"flag beats hardware", gpuTree, Options{Device: "cpu"}, nil, CPU, FromFlag},
		{"PJRT_DEVICE beats hardware", gpuTree, Options{}, map[string]string{"PJRT_DEVICE": "CPU"}, CPU, FromEnv},
		{"accel nodes without sysfs", func(t *testing.T) fakeTree { ft := newTree(t); ft.nodes(t, "accel", 4); return ft },
			Options{}, map[string]string{"TPU_ACCELERATOR_TYPE": "v4-8"}, TPU, FromDev},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ft := tc.tree(t)
			o := tc.opts
			o.LookupEnv, o.SysfsRoot, o.DevRoot, o.MetadataURL = envOf(tc.env), ft.sys, ft.dev, noMD(t)
			h, err := Detect(context.Background(), o, nil)
			if err != nil {
				t.Fatal(err)
			}
			if h.Device.V != tc.want || h.Device.Source.Kind != tc.kind {
				t.Fatalf("device %s from %s, want %s from %s", h.Device.V, h.Device.Source, tc.want, tc.kind)
			}
			p, err := NewPlan(h, Request{}, World{})
			if err != nil {
				t.Fatal(err)
			}
			switch tc.want {
			case GPU:
				_, narrowed := p.Workers[1].Env["CUDA_VISIBLE_DEVICES"]
				if len(p.Workers) != 2 || narrowed || p.Workers[1].Env["PJRT_DEVICE"] != "CUDA" || p.Workers[1].Env[EnvJAXLocalDeviceIDs] != "1" {
					t.Errorf("gpu plan %+v", p.Workers)
				}
			case CPU:
				if len(p.Workers) != 1 || p.Workers[0].Env["PJRT_DEVICE"] != "CPU" || p.Workers[0].Env["CPU_NUM_DEVICES"] != "1" {
					t.Errorf("cpu plan %+v", p.Workers)
				}
			case TPU:
				if len(p.Workers) != len(h.tpu().Chips) || p.Workers[0].Env["PJRT_DEVICE"] != "TPU" {
					t.Errorf("tpu plan %+v", p.Workers)
				}
			}
		})
	}
}

// TestMalformedEnv: every malformed env value is a ConfigError naming the variable and the value.
func TestMalformedEnv(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"TPU_NUM_DEVICES":      "abc",
		"TPU_HOST_BOUNDS":      "2,x,1",
		"TPU_PROCESS_BOUNDS":   "2,2",
		"TPU_WORKER_HOSTNAMES": "ip0,,ip2",
		"TPU_WORKER_ID":        "-1",
		"TPU_VISIBLE_CHIPS":    "0,0",
		"TPU_ACCELERATOR_TYPE": "v9-8",
		"XLA_USE_SPMD":         "maybe",
		"PJRT_DEVICE":          "QPU",
		"JOB_COMPLETION_INDEX": "one",
	}
	ft := newTree(t).tpu(t, "0x006f", 8)
	for name, value := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := Detect(context.Background(), Options{LookupEnv: envOf(map[string]string{name: value}), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: noMD(t)}, nil)
			var ce *failure.ConfigError
			if !errors.Is(err, ErrConfig) || !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a ConfigError", err)
			}
			if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), strconv.Quote(value)) {
				t.Errorf("message %q does not name %s=%q", err, name, value)
			}
			if n := strings.Count(err.Error(), "malformed"); n > 1 {
				t.Errorf("message %q says malformed %d times", err, n)
			}
		})
	}
}

func TestMetadataBudgetHonoredByDetect(t *testing.T) {
	t.Parallel()
	// A v4 host with 4 chips could be part of a larger slice, so the metadata server is asked; it stalls. Detect
	// must fall back to what sysfs proves within the budget, keeping the error for doctor.
	ft := newTree(t).tpu(t, "0x005e", 4)
	stop := make(chan struct{})
	md := newMD(t, nil, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	})
	defer close(stop)
	budget := 400 * time.Millisecond
	start := time.Now()
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(nil), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: md.URL, MetadataBudget: budget}, nil)
	el := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if el > budget+time.Second {
		t.Errorf("Detect took %s with a budget of %s", el, budget)
	}
	var me *MetadataError
	if !errors.As(h.MetadataErr, &me) || !strings.Contains(me.URL, KeyTPUEnv) || !errors.Is(h.MetadataErr, context.DeadlineExceeded) {
		t.Errorf("MetadataErr = %v", h.MetadataErr)
	}
	if h.tpu().Accelerator.V.Type != "v4-8" || h.tpu().Accelerator.Source.Kind != FromDerived {
		t.Errorf("accelerator %q from %s", h.tpu().Accelerator.V.Type, h.tpu().Accelerator.Source)
	}
}

// TestHolders: a real process (the test binary as a helper) holds a fake device node open; Holders finds its pid and
// command, CheckFree refuses the launch naming it, and the facts doctor shows name its chip and device node.
func TestHolders(t *testing.T) {
	t.Parallel()
	ft := newTree(t).tpu(t, "0x006f", 4)
	node := filepath.Join(ft.dev, "vfio", "2")
	pid := startHolder(t, node, false)

	hs, err := Holders("/proc", []string{node, filepath.Join(ft.dev, "vfio", "0")})
	must(t, err)
	if len(hs) != 1 || hs[0].PID != pid || hs[0].Path != node || !strings.Contains(hs[0].Command, "topology.test") {
		t.Fatalf("holders %+v, want pid %d holding %s", hs, pid, node)
	}

	h, err := Detect(context.Background(), Options{LookupEnv: envOf(map[string]string{"TPU_ACCELERATOR_TYPE": "v6e-4"}), SysfsRoot: ft.sys, DevRoot: ft.dev}, nil)
	must(t, err)
	err = h.CheckFree()
	var be *BusyError
	if !errors.Is(err, ErrChipBusy) || !errors.As(err, &be) || be.Holders[0].PID != pid {
		t.Fatalf("CheckFree = %v", err)
	}
	if !strings.Contains(err.Error(), "pid "+strconv.Itoa(pid)) || !strings.Contains(err.Error(), "--force") {
		t.Errorf("message %q", err)
	}

	md := newMD(t, map[string]string{KeyAcceleratorType: "v6e-4"}, nil)
	if p := h.Probe(context.Background(), Options{MetadataURL: md.URL}, nil); p == nil || !p.OK {
		t.Errorf("metadata probe %+v: want reachable", p)
	}
	lk, err := Lockfile("/proc", filepath.Join(t.TempDir(), "libtpu_lockfile"))
	if err != nil || lk.Exists || lk.Held {
		t.Errorf("lockfile %+v, %v: want absent", lk, err)
	}
	if js, err := json.Marshal(h); err != nil || !strings.Contains(string(js), `"v6e-4"`) {
		t.Errorf("host json %s: %v", js, err)
	}
	out := shown(h)
	for _, s := range []string{"accelerator type v6e-4 env TPU_ACCELERATOR_TYPE", "chip 2 " + node} {
		if !strings.Contains(out, s) {
			t.Errorf("doctor's facts lack %q:\n%s", s, out)
		}
	}
}

func TestHoldersNone(t *testing.T) {
	t.Parallel()
	ft := newTree(t).tpu(t, "0x006f", 1)
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(nil), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: noMD(t)}, nil)
	must(t, err)
	if err := h.CheckFree(); err != nil {
		t.Fatal(err)
	}
}

// TestLockfile: a real helper process holds a lockf on the lockfile: held, with its pid; after it exits, stale.
func TestLockfile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "libtpu_lockfile")
	st, err := Lockfile("/proc", path)
	must(t, err)
	if st.Exists || st.Held {
		t.Fatalf("absent lockfile: %+v", st)
	}
	must(t, os.WriteFile(path, nil, 0o644))
	st, err = Lockfile("/proc", path)
	must(t, err)
	if !st.Exists || st.Held || !st.Stale {
		t.Fatalf("unlocked lockfile: %+v", st)
	}
	pid := startHolder(t, path, true)
	st, err = Lockfile("/proc", path)
	must(t, err)
	if !st.Held || st.PID != pid || st.Stale {
		t.Fatalf("locked lockfile: %+v, want held by %d", st, pid)
	}
	// Without /proc/locks the kernel is asked directly (F_GETLK).
	st, err = Lockfile(t.TempDir(), path)
	must(t, err)
	if !st.Held || st.PID != pid {
		t.Fatalf("F_GETLK: %+v, want held by %d", st, pid)
	}
}

func TestPortHolderNone(t *testing.T) {
	t.Parallel()
	if _, _, err := PortHolder("/proc", 1); err == nil {
		t.Fatal("port 1 has a holder?")
	}
}

func TestDerivedFromNamesTheOriginalSourceOnce(t *testing.T) {
	s := DerivedFrom(DerivedFrom(Sysfs("/sys/bus/pci/devices")))
	if got, want := s.String(), "derived from sysfs /sys/bus/pci/devices"; got != want {
		t.Fatalf("DerivedFrom twice = %q, want %q", got, want)
	}
	if got, want := DerivedFrom(Env("TPU_ACCELERATOR_TYPE")).String(), "derived from env TPU_ACCELERATOR_TYPE"; got != want {
		t.Fatalf("DerivedFrom(env) = %q, want %q", got, want)
	}
}

// TestConfigErrorNamesSourcesOnce: a derived source reads "derived from ...", never "from derived from ...", and a
// malformed value says so once.
func TestConfigErrorNamesSourcesOnce(t *testing.T) {
	t.Parallel()
	ft := newTree(t) // chips hidden from the container: the accelerator type describes them
	h, err := Detect(context.Background(), Options{Device: "tpu", LookupEnv: envOf(map[string]string{"TPU_ACCELERATOR_TYPE": "v4-8"}),
		SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: refusedURL(t)}, nil)
	must(t, err)
	for _, tc := range []struct {
		req  Request
		want string
	}{
		{Request{NProcs: 3}, "nprocs 3 is not a valid split of the 4 v4 chips on this host (derived from env TPU_ACCELERATOR_TYPE); use 1, 2 or 4, or leave it unset"},
		{Request{NProcs: 2, Hosts: []string{"a", "b"}}, "accelerator type v4-8 has 1 hosts but 2 are listed (from env TPU_ACCELERATOR_TYPE; derived from rendezvous); list every host of the slice, or fix the accelerator type"},
	} {
		if _, err := NewPlan(h, tc.req, World{}); !errors.Is(err, ErrConfig) || err.Error() != tc.want {
			t.Errorf("err =\n  %v\nwant\n  %s", err, tc.want)
		}
	}
	mixed := &failure.ConfigError{Field: failure.NProcs, Value: "3", Problem: "is wrong", Sources: []failure.Source{Flag("nprocs"), DerivedFrom(Env("TPU_ACCELERATOR_TYPE")), Flag("nprocs")}}
	if got, want := mixed.Error(), "nprocs 3 is wrong (from flag --nprocs; derived from env TPU_ACCELERATOR_TYPE)"; got != want {
		t.Errorf("mixed sources: %q, want %q", got, want)
	}

	ft8 := newTree(t).tpu(t, "0x0063", 8)
	_, err = Detect(context.Background(), Options{LookupEnv: envOf(map[string]string{"TPU_NUM_DEVICES": "abc"}), SysfsRoot: ft8.sys, DevRoot: ft8.dev, MetadataURL: refusedURL(t)}, nil)
	want := `TPU_NUM_DEVICES "abc" is malformed (from env TPU_NUM_DEVICES): "abc" is not a positive whole number; set it to the number of local chips to use (1, 2, 4 or all), or unset it`
	if !errors.Is(err, ErrParse) || !errors.Is(err, ErrConfig) || err.Error() != want {
		t.Errorf("err =\n  %v\nwant\n  %s", err, want)
	}
}
