package topology

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"

	"tpurun/internal/failure"
)

// GPU is the kind of a host with NVIDIA GPUs, run through CUDA.
const GPU Device = "gpu"

// vendorNVIDIA is the PCI vendor id of NVIDIA GPUs.
const vendorNVIDIA = "0x10de"

func init() { register(gpu{}) }

// gpuHost is what detection finds on a GPU host (Host's state): the GPUs and the ones this launcher may use, by
// physical index, or by position in the parent's CUDA_VISIBLE_DEVICES when that names UUIDs.
type gpuHost struct {
	GPUs        []Chip          `json:"gpus,omitempty"`
	GPUSource   Source          `json:"gpu_source"`
	UsableGPUs  Value[[]int]    `json:"usable_gpus"`
	CUDAVisible Value[[]string] `json:"cuda_visible_devices"`
}

// gpu is the host's GPU state (stateOf).
func (h *Host) gpu() *gpuHost { return stateOf[gpuHost](h) }

// gpu is the GPU kind: one worker per usable GPU by default; like torchrun every worker sees every usable GPU.
type gpu struct{ perHost }

func (gpu) Device() Device    { return GPU }
func (gpu) PerCore() bool     { return false }
func (gpu) NCCL() bool        { return true }
func (gpu) preference() int   { return 1 }
func (gpu) pjrt() []string    { return []string{"CUDA", "GPU"} }
func (gpu) aliases() []string { return []string{"cuda"} }
func (gpu) perRank() []string { return nil } // CUDA_VISIBLE_DEVICES is the parent's, passed through as torchrun does

// devNodeGlobs: /dev/nvidiaN and the nodes every GPU process opens (nvidiactl, nvidia-uvm, nvidia-caps/...).
func (gpu) devNodeGlobs() []string { return []string{"nvidia*"} }

func (gpu) devices(h *Host) []Chip { return h.gpu().GPUs }

// claim finds NVIDIA GPUs in sysfs, else /dev/nvidiaN. A parent's CUDA_VISIBLE_DEVICES that hides every GPU (""
// or -1, the usual way to run on CPU on a GPU host) makes the host a CPU host.
func (gpu) claim(d *detector, scan pciScan) (Value[Device], bool) {
	_, src := gpuDevices(d.h.DevRoot, scan)
	cvd, set := d.env("CUDA_VISIBLE_DEVICES")
	switch {
	case !src.IsSet():
		return Value[Device]{}, false
	case set && CUDAHidesAll(cvd):
		return val(CPU, Env("CUDA_VISIBLE_DEVICES")), true
	}
	return val(GPU, src), true
}

func (gpu) settings(h *Host) []Setting {
	g := h.gpu()
	out := []Setting{spmdSetting(h)}
	if len(g.GPUs) > 0 {
		out = append(out,
			Setting{"GPUs", fmt.Sprint(len(g.GPUs)), g.GPUSource},
			Setting{"usable GPUs", counted(len(g.UsableGPUs.V), "GPU", g.UsableGPUs.V), g.UsableGPUs.Source},
			Setting{"CUDA_VISIBLE_DEVICES (parent)", strings.Join(g.CUDAVisible.V, ","), g.CUDAVisible.Source})
	}
	return out
}

// detect detects the NVIDIA GPUs of this host and the ones this launcher may use: all, or the parent's
// CUDA_VISIBLE_DEVICES.
func (gpu) detect(_ context.Context, d *detector) error {
	h, g := d.h, &gpuHost{}
	h.state = g
	h.ReplicasPerChip = 1
	scan, err := scanPCI(h.SysfsRoot)
	if err != nil {
		return err
	}
	g.GPUs, g.GPUSource = gpuDevices(h.DevRoot, scan)
	g.UsableGPUs = val(indices(len(g.GPUs)), g.GPUSource)
	// CUDA_VISIBLE_DEVICES set but empty hides every GPU from CUDA, so it is read even when empty.
	if v, ok := d.env("CUDA_VISIBLE_DEVICES"); ok {
		if CUDAHidesAll(v) {
			return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named("CUDA_VISIBLE_DEVICES"), Value: strconv.Quote(v),
				Problem: "hides every GPU from CUDA, but the gpu device was asked for", Sources: sources{Env("CUDA_VISIBLE_DEVICES"), h.Device.Source},
				Choices: []string{"--device cpu"}, Hint: "to run on CPU (leave --device auto to get it by itself), or unset CUDA_VISIBLE_DEVICES to use the GPUs"}
		}
		if err := d.cudaVisible(v); err != nil {
			return err
		}
	}
	if len(g.UsableGPUs.V) == 0 {
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.Device, Value: "gpu", Problem: "was asked for but no NVIDIA GPU was found under " +
			h.SysfsRoot + "/bus/pci/devices or " + h.DevRoot + "/nvidia*", Sources: sources{h.Device.Source},
			Hint: "use the cpu device, or detect the device (auto)"}
	}
	return nil
}

// gpuDevices are the NVIDIA GPUs found, with their device nodes /dev/nvidiaN (not nvidiactl, nvidia-uvm, ...), and
// where: sysfs, else the device nodes alone; an unset Source when none was.
func gpuDevices(devRoot string, scan pciScan) ([]Chip, Source) {
	// Only display and 3D controllers (class 0x03xxxx) are GPUs; the same card also shows audio and USB functions.
	gpus := scan.chips(func(f pciFunction) bool {
		return f.vendor == vendorNVIDIA && (f.class == "" || strings.HasPrefix(f.class, "0x03"))
	})
	nodes := numberedNodes(devRoot, "nvidia")
	if len(gpus) == 0 {
		for i, n := range nodes {
			gpus = append(gpus, Chip{Index: i, DevNode: n})
		}
		if len(gpus) == 0 {
			return nil, Source{}
		}
		return gpus, Dev(devRoot + "/nvidia*")
	}
	for i := range min(len(gpus), len(nodes)) {
		gpus[i].DevNode = nodes[i]
	}
	return gpus, Sysfs(scan.dir)
}

// cudaVisible narrows the usable GPUs to the parent's CUDA_VISIBLE_DEVICES: indices must name GPUs found on this
// host; UUIDs (GPU-..., MIG-...) are taken as given, numbered by their position.
func (d *detector) cudaVisible(v string) error {
	g := d.h.gpu()
	list, err := ParseGPUList(v)
	if err != nil {
		return envErr("CUDA_VISIBLE_DEVICES", v, err, "use GPU indices such as 0,1 or GPU UUIDs, or unset it")
	}
	idx := make([]int, len(list))
	for i, e := range list {
		n, err := strconv.Atoi(e)
		if err != nil { // UUIDs: numbered by position
			idx = indices(len(list))
			break
		}
		if len(g.GPUs) > 0 && n >= len(g.GPUs) {
			return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named("CUDA_VISIBLE_DEVICES"), Value: strconv.Quote(v),
				Problem: fmt.Sprintf("names GPU %d but this host has %d GPUs", n, len(g.GPUs)),
				Sources: sources{Env("CUDA_VISIBLE_DEVICES"), g.GPUSource}, Choices: indexChoices(len(g.GPUs)), Hint: "or unset it"}
		}
		idx[i] = n
	}
	g.UsableGPUs = val(idx, Env("CUDA_VISIBLE_DEVICES"))
	g.CUDAVisible = val(list, Env("CUDA_VISIBLE_DEVICES"))
	return nil
}

// CUDAHidesAll reports whether a CUDA_VISIBLE_DEVICES value hides every GPU from CUDA: empty, or a list whose first
// entry is a negative index (CUDA stops at the first invalid entry: "-1" is the usual way to run on CPU).
func CUDAHidesAll(v string) bool {
	first, _, _ := strings.Cut(strings.TrimSpace(v), ",")
	first = strings.TrimSpace(first)
	n, err := strconv.Atoi(first)
	return first == "" || (err == nil && n < 0)
}

// CUDAVisible are the entries of the parent's CUDA_VISIBLE_DEVICES on a GPU host, as given, when set.
func (h *Host) CUDAVisible() Value[[]string] { return h.gpu().CUDAVisible }

// GPUShareNote says which of workers local workers have no usable GPU of their own and what a program should do
// about it; "" when every worker has one.
func (h *Host) GPUShareNote(workers int) string {
	g := len(h.gpu().UsableGPUs.V)
	if workers <= g || g == 0 { // only a GPU host has usable GPUs
		return ""
	}
	return fmt.Sprintf("%d workers share the %d usable GPU(s) (%s): local ranks %d..%d have no GPU of their own, so a program "+
		"that picks cuda:LOCAL_RANK fails there (\"invalid device ordinal\"); pick cuda:LOCAL_RANK %% torch.cuda.device_count(), "+
		"use gloo on CPU (--device cpu), or run %d workers", workers, g, h.gpu().UsableGPUs.Source, g, workers-1, g)
}

// plan runs one worker per usable GPU (or nprocs of them). Like torchrun it leaves CUDA_VISIBLE_DEVICES to the
// parent unless req.IsolateGPUs; JAX_LOCAL_DEVICE_IDS names the worker's cuda:LOCAL_RANK.
func (gpu) plan(h *Host, req Request) (*Plan, error) {
	gpus := h.gpu().UsableGPUs.V // detection leaves at least one
	n := cmp.Or(req.NProcs, len(gpus))
	// More workers than GPUs (as torchrun allows): worker i's GPU is i mod the GPU count.
	p := localPlan(GPU, "CUDA", n)
	for i, w := range p.Workers {
		w.Env["GPU_NUM_DEVICES"] = strconv.Itoa(n)
		w.Env[EnvJAXLocalDeviceIDs] = strconv.Itoa(i % len(gpus))
		if req.IsolateGPUs {
			w.Env["CUDA_VISIBLE_DEVICES"] = h.gpuName(i % len(gpus))
			w.Env[EnvJAXLocalDeviceIDs] = "0"
		}
	}
	return p, nil
}

// gpuName is how CUDA_VISIBLE_DEVICES names usable GPU i: the parent's entry as given, else its index.
func (h *Host) gpuName(i int) string {
	g := h.gpu()
	if i < len(g.CUDAVisible.V) {
		return g.CUDAVisible.V[i]
	}
	return strconv.Itoa(g.UsableGPUs.V[i])
}
