package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// gpu detects the NVIDIA GPUs of this host (display and 3D controllers of vendor 0x10de in sysfs, else
// /dev/nvidiaN) and the ones this launcher may use: all, or the parent's CUDA_VISIBLE_DEVICES.
func (d *detector) gpu() error {
	h := d.h
	h.ReplicasPerChip = 1
	scan, err := scanPCI(h.SysfsRoot)
	if err != nil {
		return err
	}
	if len(scan.gpus) > 0 {
		h.GPUs, h.GPUSource = scan.gpus, Sysfs(scan.dir)
		for i, n := range devNodes(h.DevRoot, "nvidia") {
			if i < len(h.GPUs) {
				h.GPUs[i].DevNode = n
			}
		}
	} else if nodes := devNodes(h.DevRoot, "nvidia"); len(nodes) > 0 {
		for i, n := range nodes {
			h.GPUs = append(h.GPUs, Chip{Index: i, DevNode: n})
		}
		h.GPUSource = Dev(h.DevRoot + "/nvidia*")
	}
	all := make([]int, len(h.GPUs))
	for i := range all {
		all[i] = i
	}
	h.UsableGPUs = val(all, h.GPUSource)
	// CUDA_VISIBLE_DEVICES set but empty hides every GPU from CUDA, so it is read even when empty.
	if v, ok := d.env("CUDA_VISIBLE_DEVICES"); ok {
		if CUDAHidesAll(v) {
			return &ConfigError{Name: "CUDA_VISIBLE_DEVICES", Value: strconv.Quote(v),
				Problem: "hides every GPU from CUDA, but the gpu device was asked for", Sources: []Source{Env("CUDA_VISIBLE_DEVICES"), h.Device.Source},
				Choices: []string{"--device cpu"}, Hint: "to run on CPU (leave --device auto to get it by itself), or unset CUDA_VISIBLE_DEVICES to use the GPUs"}
		}
		if err := d.cudaVisible(v); err != nil {
			return err
		}
	}
	if len(h.UsableGPUs.V) == 0 {
		src := h.Device.Source
		return &ConfigError{Name: "device", Value: "gpu", Problem: "was asked for but no NVIDIA GPU was found under " +
			h.SysfsRoot + "/bus/pci/devices or " + h.DevRoot + "/nvidia*", Sources: []Source{src},
			Hint: "use the cpu device, or detect the device (auto)"}
	}
	return nil
}

// cudaVisible narrows the usable GPUs to the parent's CUDA_VISIBLE_DEVICES: indices must name GPUs found on this
// host; UUIDs (GPU-..., MIG-...) are taken as given, numbered by their position.
func (d *detector) cudaVisible(v string) error {
	h := d.h
	list, err := ParseGPUList(v)
	if err != nil {
		return envErr("CUDA_VISIBLE_DEVICES", v, err, "use GPU indices such as 0,1 or GPU UUIDs, or unset it")
	}
	idx := make([]int, len(list))
	numeric := true
	for i, e := range list {
		n, err := strconv.Atoi(e)
		if err != nil {
			numeric = false
			break
		}
		if len(h.GPUs) > 0 && n >= len(h.GPUs) {
			return &ConfigError{Name: "CUDA_VISIBLE_DEVICES", Value: strconv.Quote(v),
				Problem: fmt.Sprintf("names GPU %d but this host has %d GPUs", n, len(h.GPUs)),
				Sources: []Source{Env("CUDA_VISIBLE_DEVICES"), h.GPUSource}, Choices: indexChoices(len(h.GPUs)), Hint: "or unset it"}
		}
		idx[i] = n
	}
	if !numeric {
		for i := range idx {
			idx[i] = i
		}
	}
	h.UsableGPUs = val(idx, Env("CUDA_VISIBLE_DEVICES"))
	h.CUDAVisible = val(list, Env("CUDA_VISIBLE_DEVICES"))
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

// GPUShareNote says, when a plan of workers local workers runs more workers than this host's usable GPUs, which
// local ranks have no GPU of their own and what a program should do about it; "" when every worker has one.
func (h *Host) GPUShareNote(workers int) string {
	g := len(h.UsableGPUs.V)
	if h.Device.V != GPU || workers <= g || g == 0 {
		return ""
	}
	return fmt.Sprintf("%d workers share the %d usable GPU(s) (%s): local ranks %d..%d have no GPU of their own, so a program "+
		"that picks cuda:LOCAL_RANK fails there (\"invalid device ordinal\"); pick cuda:LOCAL_RANK %% torch.cuda.device_count(), "+
		"use gloo on CPU (--device cpu), or run %d workers", workers, g, h.UsableGPUs.Source, g, workers-1, g)
}
