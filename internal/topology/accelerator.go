package topology

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Family is one TPU generation as the accelerator type names it: a row of tpuTable.
type Family struct {
	Name            string // as in accelerator types: "v4", "v5litepod", "v5p", "v6e", "tpu7x"
	Version         int    // the digit after v/tpu: 2..8
	CountsCores     bool   // the number after the dash counts TensorCores (2 per chip), not chips
	ReplicasPerChip int    // TensorCores a chip exposes as separate devices (2 on v2/v3, and 7x per JAX)
	ThreeD          bool   // 3D torus (v4, v5p, 7x); v5e/v6e are 2D
	MaxSingleHost   int    // the most chips one host of this family has in a single-host slice
	ChipsPerHost    int    // chips per host of a multi-host slice
	DevNodes        string // "accel" (/dev/accelN) or "vfio" (/dev/vfio/N)
	PCIID           string // its PCI device id under vendor 0x1ae0 (v2 and v3 share one)
	NoType          bool   // no accelerator type names it (the internal/testing chip)
}

// Accelerator is a parsed accelerator type such as v4-16 or v5litepod-8.
type Accelerator struct {
	Type   string `json:"type"`  // as given, canonical spelling: "v4-16"
	Family Family `json:"-"`     // the generation
	Count  int    `json:"count"` // the number after the dash
}

// Chips is the number of chips of the whole slice.
func (a Accelerator) Chips() int {
	if a.Family.CountsCores {
		return a.Count / 2
	}
	return a.Count
}

// Hosts is the number of hosts of the slice.
func (a Accelerator) Hosts() int {
	if a.Chips() <= a.Family.MaxSingleHost {
		return 1
	}
	return a.Chips() / a.Family.ChipsPerHost
}

// ChipsPerHost is the number of chips each host of the slice has.
func (a Accelerator) ChipsPerHost() int {
	if a.Hosts() == 1 {
		return a.Chips()
	}
	return a.Family.ChipsPerHost
}

// ChipsPerHostBounds is the chip grid of one host (TPU_CHIPS_PER_HOST_BOUNDS).
func (a Accelerator) ChipsPerHostBounds() Bounds {
	b, _ := ChipBounds(a.ChipsPerHost())
	return b
}

// HostBounds is the host grid of the slice (TPU_HOST_BOUNDS): the slice shape divided by the chips-per-host bounds.
func (a Accelerator) HostBounds() Bounds {
	hosts := a.Hosts()
	cph := a.ChipsPerHostBounds()
	if hosts == 1 {
		return Bounds{1, 1, 1}
	}
	if hosts&(hosts-1) != 0 || cph == nil {
		return Bounds{1, 1, hosts} // unusual sizes: a line of hosts (unverified)
	}
	shape := append(Bounds(nil), cph...)
	// Grow it as the default topologies grow (v4: 2x2x1, 2x2x2, 2x2x4, 2x4x4...; v5e: 2x2, 2x4, 4x4...): double
	// the smallest dimension, preferring the last one.
	dims := []int{2, 1, 0}
	if !a.Family.ThreeD {
		dims = []int{1, 0}
	}
	for shape.Product() < a.Chips() {
		best := dims[0]
		for _, d := range dims[1:] {
			if shape[d] < shape[best] {
				best = d
			}
		}
		shape[best] *= 2
	}
	hb := make(Bounds, 3)
	for i := range hb {
		hb[i] = shape[i] / cph[i]
	}
	return hb
}

// ParseAcceleratorType parses "v4-16", "v5litepod-8", "v5p-16", "v6e-8", "tpu7x-8", "v2-8", "v3-32" (and the
// aliases v5e-N, v7x-N). It checks that the count fits the family: whole chips, whole hosts.
func ParseAcceleratorType(s string) (Accelerator, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := strings.LastIndexByte(t, '-')
	if i <= 0 || i == len(t)-1 {
		return Accelerator{}, parseErrorf("accelerator type %q is not <generation>-<size> such as v4-8, v5litepod-8 or v6e-16", s)
	}
	name, num := t[:i], t[i+1:]
	if a, ok := familyAliases[name]; ok {
		name = a
	}
	fam, ok := families[name]
	if !ok {
		return Accelerator{}, parseErrorf("accelerator type %q has unknown generation %q; known: %s", s, t[:i], strings.Join(slices.Sorted(maps.Keys(families)), ", "))
	}
	n, err := ParseCount(num)
	if err != nil {
		return Accelerator{}, parseErrorf("accelerator type %q: size %q is not a positive whole number", s, num)
	}
	a := Accelerator{Type: fam.Name + "-" + strconv.Itoa(n), Family: fam, Count: n}
	if fam.CountsCores && n%2 != 0 {
		return Accelerator{}, parseErrorf("accelerator type %q: %s counts TensorCores, 2 per chip, so the size must be even", s, fam.Name)
	}
	if c := a.Chips(); c > fam.MaxSingleHost && c%fam.ChipsPerHost != 0 {
		return Accelerator{}, parseErrorf("accelerator type %q: %d chips do not fill whole hosts of %d chips", s, c, fam.ChipsPerHost)
	}
	if _, err := ChipBounds(a.ChipsPerHost()); err != nil {
		return Accelerator{}, parseErrorf("accelerator type %q: %d chips on one host is not a known host shape (1, 2, 4 or 8)", s, a.ChipsPerHost())
	}
	return a, nil
}

// deriveAccelerator names the single-host slice that n chips of family name make ("v4-8" for 4 v4 chips).
func deriveAccelerator(name string, n int) (Accelerator, bool) {
	fam, ok := families[name]
	if !ok || n < 1 {
		return Accelerator{}, false
	}
	count := n
	if fam.CountsCores {
		count = 2 * n
	}
	a, err := ParseAcceleratorType(fam.Name + "-" + strconv.Itoa(count))
	return a, err == nil
}
