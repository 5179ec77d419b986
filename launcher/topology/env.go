package topology

import (
	"strconv"
	"strings"
)

// sliceFromFlagsAndEnv reads the slice description: flags first, then env.
func (d *detector) sliceFromFlagsAndEnv() error {
	h := d.h
	if d.opts.AcceleratorType != "" {
		a, err := ParseAcceleratorType(d.opts.AcceleratorType)
		if err != nil {
			return &ConfigError{Name: "accelerator type", Value: strconv.Quote(d.opts.AcceleratorType), Problem: "is malformed",
				Sources: []Source{Flag("accelerator-type")}, Err: err}
		}
		h.Accelerator = val(a, Flag("accelerator-type"))
	} else if v, ok := d.lookup("TPU_ACCELERATOR_TYPE"); ok {
		a, err := ParseAcceleratorType(v)
		if err != nil {
			return envErr("TPU_ACCELERATOR_TYPE", v, err, "use a type such as v4-8, v5litepod-8 or v6e-16, or unset it")
		}
		h.Accelerator = val(a, Env("TPU_ACCELERATOR_TYPE"))
	}
	for _, b := range []struct {
		name string
		dst  *Value[Bounds]
	}{{"TPU_HOST_BOUNDS", &h.HostBounds}, {"TPU_CHIPS_PER_HOST_BOUNDS", &h.ChipsPerHostBounds}, {"TPU_PROCESS_BOUNDS", &h.ProcessBounds}} {
		if v, ok := d.lookup(b.name); ok {
			bb, err := ParseBounds(v)
			if err == nil && len(bb) != 3 && b.name != "TPU_PROCESS_BOUNDS" {
				err = parseErrorf("bounds %q has %d numbers; a host grid has 3", v, len(bb))
			}
			if err != nil {
				return envErr(b.name, v, err, "use three positive numbers such as 2,2,1, or unset it")
			}
			*b.dst = val(bb, Env(b.name))
		}
	}
	// torch_xla skips the metadata server for any non-empty value (even "0"); an empty one does not count.
	if v, ok := d.env("TPU_SKIP_MDS_QUERY"); ok && v != "" {
		h.SkipMDS = val(v, Env("TPU_SKIP_MDS_QUERY"))
	}
	if v, ok := d.lookup("TPU_WORKER_HOSTNAMES"); ok {
		hosts, err := ParseHostList(v)
		if err != nil {
			return envErr("TPU_WORKER_HOSTNAMES", v, err, "list every host of the slice, comma-separated, in worker order")
		}
		h.Hostnames = val(hosts, Env("TPU_WORKER_HOSTNAMES"))
	}
	for _, name := range []string{"TPU_WORKER_ID", "JOB_COMPLETION_INDEX"} { // GKE/JobSet index as a fallback
		if v, ok := d.lookup(name); ok {
			n, err := ParseIndex(v)
			if err != nil {
				return envErr(name, v, err, "use this host's index in the slice, from 0")
			}
			h.WorkerID = val(n, Env(name))
			break
		}
	}
	if v, ok := d.lookup("TPU_NUM_DEVICES"); ok {
		n, err := ParseCount(v)
		if err != nil {
			return envErr("TPU_NUM_DEVICES", v, err, "set it to the number of local chips to use (1, 2, 4 or all), or unset it")
		}
		h.NumDevices = val(n, Env("TPU_NUM_DEVICES"))
	}
	if v, ok := d.lookup("TPU_VISIBLE_CHIPS"); ok {
		list, err := ParseChipList(v)
		if err != nil {
			return envErr("TPU_VISIBLE_CHIPS", v, err, "use chip indices such as 0,1,2,3, or unset it")
		}
		h.VisibleChips = val(list, Env("TPU_VISIBLE_CHIPS"))
	}
	for _, name := range []string{"MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID", "MEGASCALE_PORT"} {
		if v, ok := d.lookup(name); ok {
			if name != "MEGASCALE_COORDINATOR_ADDRESS" {
				parse := ParseIndex
				if name == "MEGASCALE_NUM_SLICES" || name == "MEGASCALE_PORT" {
					parse = ParseCount
				}
				if _, err := parse(v); err != nil {
					return envErr(name, v, err, "use a whole number, or unset it")
				}
			}
			if h.Megascale == nil {
				h.Megascale = map[string]Value[string]{}
			}
			h.Megascale[name] = val(strings.TrimSpace(v), Env(name))
		}
	}
	return nil
}
