package topology

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
	if v, ok := d.lookup("CUDA_VISIBLE_DEVICES"); ok {
		list, err := ParseChipList(v)
		if err != nil {
			return envErr("CUDA_VISIBLE_DEVICES", v, err, "use GPU indices such as 0,1")
		}
		h.UsableGPUs = val(list, Env("CUDA_VISIBLE_DEVICES"))
	}
	if len(h.UsableGPUs.V) == 0 {
		src := h.Device.Source
		return &ConfigError{Name: "device", Value: "gpu", Problem: "was asked for but no NVIDIA GPU was found under " +
			h.SysfsRoot + "/bus/pci/devices or " + h.DevRoot + "/nvidia*", Sources: []Source{src},
			Hint: "use --device cpu or --device auto"}
	}
	return nil
}
