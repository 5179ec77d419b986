package topology

import (
	"cmp"
	"strconv"
	"strings"

	"tpurun/internal/failure"
)

// sliceFromFlagsAndEnv reads the slice description: flags first, then env; the first malformed value is an error.
func (d *detector) sliceFromFlagsAndEnv() error {
	t := d.h.tpu()
	if v, ok := d.env("TPU_SKIP_MDS_QUERY"); ok && v != "" {
		// torch_xla skips the metadata server for any non-empty value (even "0"); an empty one does not count.
		t.SkipMDS = val(v, Env("TPU_SKIP_MDS_QUERY"))
	}
	const boundsHint = "use three positive numbers such as 2,2,1, or unset it"
	return cmp.Or(d.acceleratorType(),
		readEnv(d, &t.HostBounds, parseGrid, boundsHint, "TPU_HOST_BOUNDS"),
		readEnv(d, &t.ChipsPerHostBounds, parseGrid, boundsHint, "TPU_CHIPS_PER_HOST_BOUNDS"),
		readEnv(d, &t.ProcessBounds, ParseBounds, boundsHint, "TPU_PROCESS_BOUNDS"),
		readEnv(d, &t.Hostnames, ParseHostList, "list every host of the slice, comma-separated, in worker order",
			"TPU_WORKER_HOSTNAMES"),
		readEnv(d, &t.WorkerID, ParseIndex, "use this host's index in the slice, from 0", "TPU_WORKER_ID",
			"JOB_COMPLETION_INDEX"), // GKE/JobSet's
		readEnv(d, &t.NumDevices, ParseCount, "set it to the number of local chips to use (1, 2, 4 or all), or unset it",
			"TPU_NUM_DEVICES"),
		readEnv(d, &t.VisibleChips, ParseChipList, "use chip indices such as 0,1,2,3, or unset it", "TPU_VISIBLE_CHIPS"),
		d.envMegascale())
}

// acceleratorType reads --accelerator-type, else TPU_ACCELERATOR_TYPE.
func (d *detector) acceleratorType() error {
	if t := d.opts.AcceleratorType; t != "" {
		a, err := ParseAcceleratorType(t)
		if err != nil {
			return &failure.ConfigError{Kind: ErrConfig, Field: failure.AcceleratorType, Value: strconv.Quote(t),
				Problem: "is malformed", Sources: sources{Flag("accelerator-type")}, Err: err}
		}
		d.h.tpu().Accelerator = val(a, Flag("accelerator-type"))
		return nil
	}
	return readEnv(d, &d.h.tpu().Accelerator, ParseAcceleratorType,
		"use a type such as v4-8, v5litepod-8 or v6e-16, or unset it", "TPU_ACCELERATOR_TYPE")
}

// parseGrid parses a host or chip grid: ParseBounds, three numbers.
func parseGrid(v string) (Bounds, error) {
	b, err := ParseBounds(v)
	if err == nil && len(b) != 3 {
		err = parseErrorf("bounds %q has %d numbers; a host grid has 3", v, len(b))
	}
	return b, err
}

// readEnv sets dst from the first of names set and not blank, parsed by parse; a malformed one is an error with hint.
func readEnv[T any](d *detector, dst *Value[T], parse func(string) (T, error), hint string, names ...string) error {
	for _, name := range names {
		if v, ok := d.lookup(name); ok {
			x, err := parse(v)
			if err != nil {
				return envErr(name, v, err, hint)
			}
			*dst = val(x, Env(name))
			return nil
		}
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

// The multislice variables (TPU_FACTS.md): from env or tpu-env, copied to every worker, or set for a multi-slice
// world.
const (
	megascaleCoordinator  = "MEGASCALE_COORDINATOR_ADDRESS" // host 0 of slice 0
	EnvMegascaleNumSlices = "MEGASCALE_NUM_SLICES"
	EnvMegascaleSliceID   = "MEGASCALE_SLICE_ID"
	megascalePort         = "MEGASCALE_PORT"
)

// DefaultMegascalePort is MEGASCALE_PORT by convention (TPU_FACTS.md): node 0's, shared with every node.
const DefaultMegascalePort = 8081

var megascaleNames = []string{megascaleCoordinator, EnvMegascaleNumSlices, EnvMegascaleSliceID, megascalePort}

// ParseMegascale parses the number of a multislice variable: MEGASCALE_NUM_SLICES and MEGASCALE_PORT count from
// 1, MEGASCALE_SLICE_ID from 0; any other name holds no number.
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
