package topology

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// h100Tree is the fake sysfs/dev of an NVIDIA host with n H100s as the host shows them: vendor 0x10de,
// device 0x2330, class 0x030200 (plus the cards' audio functions, class 0x040300), /dev/nvidia0..n-1, nvidiactl,
// nvidia-uvm, nvidia-uvm-tools and the nvidia-caps directory.
func h100Tree(t *testing.T, n int) fakeTree {
	t.Helper()
	ft := newTree(t).pci(t, vendorNVIDIA, "0x2330", "0x030200", n, "nvidia")
	ft.pci(t, vendorNVIDIA, "0x22a3", "0x040300", n, "")
	for _, f := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} {
		must(t, os.WriteFile(filepath.Join(ft.dev, f), nil, 0o644))
	}
	must(t, os.MkdirAll(filepath.Join(ft.dev, "nvidia-caps"), 0o755))
	must(t, os.WriteFile(filepath.Join(ft.dev, "nvidia-caps", "nvidia-cap1"), nil, 0o644))
	return ft
}

// TestDoctorOneH100: the doctor of a one-H100 host said "GPUs 1, usable GPUs 0": the usable row printed the list
// of usable indices ("0"). It now gives the count and the indices, and the control nodes are no GPUs.
func TestDoctorOneH100(t *testing.T) {
	t.Parallel()
	ft := h100Tree(t, 1)
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(nil), SysfsRoot: ft.sys, DevRoot: ft.dev, ProcRoot: t.TempDir()}, nil)
	must(t, err)
	if h.Device.V != GPU || len(h.gpu().GPUs) != 1 || h.gpu().GPUs[0].DevNode != filepath.Join(ft.dev, "nvidia0") || len(h.gpu().UsableGPUs.V) != 1 {
		t.Fatalf("device %s, GPUs %+v, usable %v", h.Device.V, h.gpu().GPUs, h.gpu().UsableGPUs.V)
	}
	out := shown(h)
	for _, want := range []string{"usable GPUs", "1 (GPU 0)"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "usable" && f[1] == "GPUs" && f[2] == "0" {
			t.Errorf("doctor still says %q", line)
		}
	}
}

// TestGPUEnv: on a 4-GPU host the workers keep the parent's CUDA_VISIBLE_DEVICES (torchrun's behaviour) and each
// is told its device for JAX; per-rank CUDA_VISIBLE_DEVICES only with IsolateGPUs; the parent's list narrows what
// is usable, by index or UUID; bad lists are refused naming the variable and what was found.
func TestGPUEnv(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		cvd     *string // the parent's CUDA_VISIBLE_DEVICES
		req     Request
		visible []string // per worker CUDA_VISIBLE_DEVICES; nil entries ("-") = unset
		jax     []string // per worker JAX_LOCAL_DEVICE_IDS
		wantErr []string
	}{
		{name: "all GPUs, torchrun's way", visible: []string{"-", "-", "-", "-"}, jax: []string{"0", "1", "2", "3"}},
		{name: "all GPUs, isolated", req: Request{IsolateGPUs: true}, visible: []string{"0", "1", "2", "3"}, jax: []string{"0", "0", "0", "0"}},
		{name: "two workers of four GPUs", req: Request{NProcs: 2}, visible: []string{"-", "-"}, jax: []string{"0", "1"}},
		{name: "parent's subset", cvd: ptr("2,3"), visible: []string{"-", "-"}, jax: []string{"0", "1"}},
		{name: "parent's subset, isolated", cvd: ptr("3,1"), req: Request{IsolateGPUs: true}, visible: []string{"3", "1"}, jax: []string{"0", "0"}},
		{name: "UUIDs, isolated", cvd: ptr("GPU-8f6c2a1e-0000-1111-2222-333344445555,MIG-GPU-aa/1/0"), req: Request{IsolateGPUs: true},
			visible: []string{"GPU-8f6c2a1e-0000-1111-2222-333344445555", "MIG-GPU-aa/1/0"}, jax: []string{"0", "0"}},
		{name: "more workers than the parent's GPUs share them, as under torchrun", cvd: ptr("2,3"), req: Request{NProcs: 3},
			visible: []string{"-", "-", "-"}, jax: []string{"0", "1", "0"}},
		{name: "more workers than GPUs, isolated round robin", cvd: ptr("3,1"), req: Request{NProcs: 5, IsolateGPUs: true},
			visible: []string{"3", "1", "3", "1", "3"}, jax: []string{"0", "0", "0", "0", "0"}},
		{name: "index off the host", cvd: ptr("1,4"),
			wantErr: []string{"CUDA_VISIBLE_DEVICES \"1,4\" names GPU 4 but this host has 4 GPUs (from env CUDA_VISIBLE_DEVICES, sysfs ", "use 0, 1, 2 or 3"}},
		{name: "empty hides every GPU", cvd: ptr(""), wantErr: []string{"CUDA_VISIBLE_DEVICES \"\" hides every GPU from CUDA, but the gpu device was asked for", "use --device cpu"}},
		{name: "-1 hides every GPU", cvd: ptr("-1"), wantErr: []string{"CUDA_VISIBLE_DEVICES \"-1\" hides every GPU", "use --device cpu", "unset CUDA_VISIBLE_DEVICES"}},
		{name: "garbage", cvd: ptr("0,x"), wantErr: []string{"CUDA_VISIBLE_DEVICES \"0,x\" is malformed", "entry 2 (\"x\") is neither a GPU index nor a GPU-/MIG- UUID"}},
		{name: "twice", cvd: ptr("1,1"), wantErr: []string{"names GPU 1 twice"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ft := h100Tree(t, 4)
			env := map[string]string{}
			if tc.cvd != nil {
				env["CUDA_VISIBLE_DEVICES"] = *tc.cvd
			}
			h, err := Detect(context.Background(), Options{Device: "gpu", LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev}, nil)
			var p *Plan
			if err == nil {
				p, err = NewPlan(h, tc.req, World{})
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
				got, ok := w.Env["CUDA_VISIBLE_DEVICES"]
				if !ok {
					got = "-"
				}
				if got != tc.visible[i] || w.Env[EnvJAXLocalDeviceIDs] != tc.jax[i] || w.Env["PJRT_LOCAL_PROCESS_RANK"] != strconv.Itoa(i) {
					t.Errorf("worker %d: CUDA_VISIBLE_DEVICES %q JAX_LOCAL_DEVICE_IDS %q; want %q %q (env %v)", i, got, w.Env[EnvJAXLocalDeviceIDs], tc.visible[i], tc.jax[i], w.Env)
				}
			}
		})
	}
}

// TestGPUWorkersWithJAX: with the plan's env and the coordinator the launcher adds, JAX's
// jax.distributed.initialize(process_id=RANK, num_processes=WORLD_SIZE) on a GPU host agrees on one coordinator and
// dense ids, and each worker restricts itself to its GPU (JAX_LOCAL_DEVICE_IDS); with no arguments it fails as JAX
// does ("Number of processes must be defined."), which the doctor's note says.
func TestGPUWorkersWithJAX(t *testing.T) {
	t.Parallel()
	ft := h100Tree(t, 4)
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(nil), SysfsRoot: ft.sys, DevRoot: ft.dev}, nil)
	must(t, err)
	p, err := NewPlan(h, Request{}, World{})
	must(t, err)
	p.SetJAXCoordinator("127.0.0.1:8482")
	for _, w := range p.Workers {
		child := tpurunChild(pyEnv{}, p, w)
		rank, world := w.Rank, len(p.Workers)
		c, err := jaxInitialize(child, nil, false, &rank, &world)
		if err != nil || c.Coordinator != "127.0.0.1:8482" || c.ID != w.Rank || c.Processes != 4 || child[EnvJAXLocalDeviceIDs] != strconv.Itoa(w.LocalRank) {
			t.Errorf("rank %d: %+v, %v, JAX_LOCAL_DEVICE_IDS %q", w.Rank, c, err, child[EnvJAXLocalDeviceIDs])
		}
		var pe *pyError
		if _, err := jaxInitialize(child, nil, false, nil, nil); !errors.As(err, &pe) || pe.Msg != "Number of processes must be defined." {
			t.Errorf("rank %d without arguments: %v", w.Rank, err)
		}
	}
}

// TestCPUOnAGPUHost: CUDA_VISIBLE_DEVICES="" or -1, the usual "run on CPU on a GPU box", makes the detected device
// the CPU (it was refused as malformed), and more workers than GPUs get a note naming the ranks without a GPU.
func TestCPUOnAGPUHost(t *testing.T) {
	t.Parallel()
	ft := h100Tree(t, 2)
	for _, cvd := range []string{"", "-1", " -1 ", "-1,0"} {
		h, err := Detect(context.Background(), Options{LookupEnv: envOf(map[string]string{"CUDA_VISIBLE_DEVICES": cvd}), SysfsRoot: ft.sys, DevRoot: ft.dev}, nil)
		if err != nil || h.Device.V != CPU || h.Device.Source != Env("CUDA_VISIBLE_DEVICES") {
			t.Fatalf("CUDA_VISIBLE_DEVICES=%q: device %v, err %v; want cpu from the variable", cvd, h, err)
		}
		if p, err := NewPlan(h, Request{NProcs: 3}, World{}); err != nil || len(p.Workers) != 3 || p.Device != CPU {
			t.Fatalf("CUDA_VISIBLE_DEVICES=%q: plan %+v, %v", cvd, p, err)
		}
	}
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(nil), SysfsRoot: ft.sys, DevRoot: ft.dev}, nil)
	must(t, err)
	if n := h.GPUShareNote(2); n != "" {
		t.Errorf("2 workers on 2 GPUs: note %q", n)
	}
	if n := h.GPUShareNote(4); !strings.Contains(n, "4 workers share the 2 usable GPU(s)") || !strings.Contains(n, "local ranks 2..3") ||
		!strings.Contains(n, "cuda:LOCAL_RANK % torch.cuda.device_count()") {
		t.Errorf("4 workers on 2 GPUs: note %q", n)
	}
}

func ptr(s string) *string { return &s }
