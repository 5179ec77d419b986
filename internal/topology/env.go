package topology

import (
	"strconv"
	"strings"

	"tpurun/internal/failure"
)

// sliceFromFlagsAndEnv reads the slice description: flags first, then env. Malformed values are *failure.ConfigError.
func (d *detector) sliceFromFlagsAndEnv() error {
	for _, read := range []func() error{d.acceleratorType, d.envBounds, d.envSkipMDS, d.envHostnames, d.envWorkerID,
		d.envNumDevices, d.envVisibleChips, d.envMegascale} {
		if err := read(); err != nil {
			return err
		}
	}
	return nil
}

// acceleratorType reads --accelerator-type, else TPU_ACCELERATOR_TYPE.
func (d *detector) acceleratorType() error {
	if t := d.opts.AcceleratorType; t != "" {
		a, err := ParseAcceleratorType(t)
		if err != nil {
			return &failure.ConfigError{Kind: ErrConfig, Field: failure.AcceleratorType, Value: strconv.Quote(t), Problem: "is malformed",
				Sources: []failure.Source{Flag("accelerator-type")}, Err: err}
		}
		d.h.tpu().Accelerator = val(a, Flag("accelerator-type"))
		return nil
	}
	if v, ok := d.lookup("TPU_ACCELERATOR_TYPE"); ok {
		a, err := ParseAcceleratorType(v)
		if err != nil {
			return envErr("TPU_ACCELERATOR_TYPE", v, err, "use a type such as v4-8, v5litepod-8 or v6e-16, or unset it")
		}
		d.h.tpu().Accelerator = val(a, Env("TPU_ACCELERATOR_TYPE"))
	}
	return nil
}

// envBounds reads TPU_HOST_BOUNDS and TPU_CHIPS_PER_HOST_BOUNDS (three numbers each) and TPU_PROCESS_BOUNDS.
func (d *detector) envBounds() error {
	t := d.h.tpu()
	for _, b := range []struct {
		name string
		dst  *Value[Bounds]
	}{{"TPU_HOST_BOUNDS", &t.HostBounds}, {"TPU_CHIPS_PER_HOST_BOUNDS", &t.ChipsPerHostBounds}, {"TPU_PROCESS_BOUNDS", &t.ProcessBounds}} {
		v, ok := d.lookup(b.name)
		if !ok {
			continue
		}
		bb, err := ParseBounds(v)
		if err == nil && len(bb) != 3 && b.name != "TPU_PROCESS_BOUNDS" {
			err = parseErrorf("bounds %q has %d numbers; a host grid has 3", v, len(bb))
		}
		if err != nil {
			return envErr(b.name, v, err, "use three positive numbers such as 2,2,1, or unset it")
		}
		*b.dst = val(bb, Env(b.name))
	}
	return nil
}

// envSkipMDS reads TPU_SKIP_MDS_QUERY: torch_xla skips the metadata server for any non-empty value (even "0"); an
// empty one does not count.
func (d *detector) envSkipMDS() error {
	if v, ok := d.env("TPU_SKIP_MDS_QUERY"); ok && v != "" {
		d.h.tpu().SkipMDS = val(v, Env("TPU_SKIP_MDS_QUERY"))
	}
	return nil
}

// envHostnames reads TPU_WORKER_HOSTNAMES.
func (d *detector) envHostnames() error {
	if v, ok := d.lookup("TPU_WORKER_HOSTNAMES"); ok {
		hosts, err := ParseHostList(v)
		if err != nil {
			return envErr("TPU_WORKER_HOSTNAMES", v, err, "list every host of the slice, comma-separated, in worker order")
		}
		d.h.tpu().Hostnames = val(hosts, Env("TPU_WORKER_HOSTNAMES"))
	}
	return nil
}

// envWorkerID reads TPU_WORKER_ID, else GKE/JobSet's JOB_COMPLETION_INDEX.
func (d *detector) envWorkerID() error {
	for _, name := range []string{"TPU_WORKER_ID", "JOB_COMPLETION_INDEX"} {
		if v, ok := d.lookup(name); ok {
			n, err := ParseIndex(v)
			if err != nil {
				return envErr(name, v, err, "use this host's index in the slice, from 0")
			}
			d.h.tpu().WorkerID = val(n, Env(name))
			return nil
		}
	}
	return nil
}

// envNumDevices reads TPU_NUM_DEVICES.
func (d *detector) envNumDevices() error {
	if v, ok := d.lookup("TPU_NUM_DEVICES"); ok {
		n, err := ParseCount(v)
		if err != nil {
			return envErr("TPU_NUM_DEVICES", v, err, "set it to the number of local chips to use (1, 2, 4 or all), or unset it")
		}
		d.h.tpu().NumDevices = val(n, Env("TPU_NUM_DEVICES"))
	}
	return nil
}

// envVisibleChips reads the parent's TPU_VISIBLE_CHIPS.
func (d *detector) envVisibleChips() error {
	if v, ok := d.lookup("TPU_VISIBLE_CHIPS"); ok {
		list, err := ParseChipList(v)
		if err != nil {
			return envErr("TPU_VISIBLE_CHIPS", v, err, "use chip indices such as 0,1,2,3, or unset it")
		}
		d.h.tpu().VisibleChips = val(list, Env("TPU_VISIBLE_CHIPS"))
	}
	return nil
}

// envMegascale reads the MEGASCALE_* variables, checking the numbers.
func (d *detector) envMegascale() error {
	for _, name := range megascaleNames {
		v, ok := d.lookup(name)
		if !ok {
			continue
		}
		if name != megascaleCoordinator {
			if _, err := ParseMegascale(name, v); err != nil {
				return envErr(name, v, err, "use a whole number, or unset it")
			}
		}
		d.h.setMegascale(name, val(strings.TrimSpace(v), Env(name)))
	}
	return nil
}

// The multislice variables (TPU_FACTS.md): given by env or tpu-env, copied to every worker, or set by WorldPlan for
// a multi-slice world.
const (
	megascaleCoordinator  = "MEGASCALE_COORDINATOR_ADDRESS" // host 0 of slice 0
	EnvMegascaleNumSlices = "MEGASCALE_NUM_SLICES"
	EnvMegascaleSliceID   = "MEGASCALE_SLICE_ID"
	megascalePort         = "MEGASCALE_PORT"
)

// DefaultMegascalePort is MEGASCALE_PORT by convention (TPU_FACTS.md): node 0's, shared with every node.
const DefaultMegascalePort = 8081

var megascaleNames = []string{megascaleCoordinator, EnvMegascaleNumSlices, EnvMegascaleSliceID, megascalePort}

// ParseMegascale is tpurun's one parser of the numbers of the multislice variables: MEGASCALE_NUM_SLICES and
// MEGASCALE_PORT count from 1, MEGASCALE_SLICE_ID is an index from 0. Any other name (the coordinator's address
// included) holds no number: an error.
func ParseMegascale(name, v string) (int, error) {
	switch name {
	case EnvMegascaleNumSlices, megascalePort:
		return ParseCount(v)
	case EnvMegascaleSliceID:
		return ParseIndex(v)
	}
	return 0, parseErrorf("%s holds no number", name)
}

// setMegascale records a MEGASCALE_* value unless one is given already (env before tpu-env).
func (h *Host) setMegascale(name string, v Value[string]) {
	t := h.tpu()
	if t.Megascale == nil {
		t.Megascale = map[string]Value[string]{}
	}
	if _, given := t.Megascale[name]; !given {
		t.Megascale[name] = v
	}
}
