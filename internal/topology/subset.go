package topology

import (
	"fmt"
	"strconv"

	"tpurun/internal/failure"
)

// subsetChipBounds is TPU_CHIPS_PER_HOST_BOUNDS for a run that uses `used` of the host's `total` chips: the chip
// grid of the subset, so that process bounds = host bounds x chips-per-host bounds (TPU_FACTS.md), as Ray does.
// Unverified against libtpu (xmp.spawn leaves the host's bounds, docs/TOPOLOGY.md): the one place to change.
func subsetChipBounds(host Bounds, used, total int) Bounds {
	if used >= total || host.Product() == used {
		return host
	}
	if b, err := ChipBounds(used); err == nil {
		return b
	}
	return host
}

// subsetError is the refusal of a usable chip count that has no chip grid, naming where the count came from and
// the env settings that fix it.
func subsetError(h *Host) error {
	t := h.tpu()
	n, total := len(t.Usable.V), len(t.Chips)
	var choices []string
	fix := 0 // the largest valid subset below n, for the example
	for _, c := range []int{1, 2, 4, 8} {
		if c <= total {
			choices = append(choices, strconv.Itoa(c))
			if c < n {
				fix = c
			}
		}
	}
	fix = max(fix, 1)
	keep := t.Usable.V[:min(fix, n)]
	return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named(fmt.Sprintf("%d usable chips", n)),
		Problem: fmt.Sprintf("is not a valid subset of this %d-chip host", total), Sources: t.usableFrom(),
		Choices: choices, Hint: fmt.Sprintf("e.g. TPU_VISIBLE_CHIPS=%s or TPU_NUM_DEVICES=%d", joinInts(keep, ","), fix)}
}

// usableFrom are where the usable chips came from: their source, and the parent's TPU_VISIBLE_CHIPS that
// TPU_NUM_DEVICES limited.
func (t *TPUFacts) usableFrom() sources {
	if t.NumDevices.IsSet() && t.VisibleChips.IsSet() {
		return sources{t.Usable.Source, t.VisibleChips.Source}
	}
	return sources{t.Usable.Source}
}

func familyLabel(f string) string {
	switch f {
	case "v5litepod":
		return "v5e"
	case "":
		return "TPU"
	}
	return f
}
