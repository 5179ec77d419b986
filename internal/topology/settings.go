package topology

import (
	"context"
	"fmt"

	"go.uber.org/zap"
)

// Setting is one detected value as `tpurun doctor` shows it: its name ("accelerator type", "usable GPUs"), its
// value as text, and where it came from (an unset Source: not detected, not shown).
type Setting struct {
	Name, Value string
	Source      Source
}

// Settings are the host's detected values: the device, then its kind's (the SPMD setting, the chips, the slice).
func (h *Host) Settings() []Setting {
	return append([]Setting{{"device", string(h.Device.V), h.Device.Source}}, h.Device.V.Kind().settings(h)...)
}

// Chips are the host's chips (or GPUs) with their PCI functions and device nodes, in index order.
func (h *Host) Chips() []Chip { return h.Device.V.Kind().devices(h) }

// Probe checks that the metadata server answers (within opts.MetadataBudget), on a kind that reads it (TPU); nil
// elsewhere. log receives the queries' debug logs; nil means none.
func (h *Host) Probe(ctx context.Context, opts Options, log *zap.Logger) *Probe {
	return h.Device.V.Kind().probe(ctx, h, opts, log)
}

// spmdSetting is the setting every kind shows: whether the run is SPMD.
func spmdSetting(h *Host) Setting { return Setting{"SPMD", fmt.Sprint(h.SPMD.V), h.SPMD.Source} }

// counted renders a count with the indices it counts: "1 (GPU 0)", "4 (chips 0,1,2,3)", "0".
func counted(n int, noun string, idx []int) string {
	if n == 0 {
		return "0"
	} else if n > 1 {
		noun += "s"
	}
	return fmt.Sprintf("%d (%s %s)", n, noun, joinInts(idx, ","))
}
