package topology

import (
	"fmt"
	"strconv"
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
