package topology

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// detectTPU detects the chips and the slice of a TPU host.
func (d *detector) detectTPU(ctx context.Context) error {
	h := d.h
	if err := d.sliceFromFlagsAndEnv(); err != nil {
		return err
	}
	if err := d.chipsFromPCI(); err != nil {
		return err
	}
	if err := h.adoptAccelerator(); err != nil {
		return err
	}
	d.attachDevNodes()
	if err := d.metadata(ctx); err != nil {
		return err
	}
	if err := h.adoptAccelerator(); err != nil { // the metadata server may have named it
		return err
	}
	if err := d.chipsFromAccelerator(); err != nil {
		return err
	}
	if h.ReplicasPerChip == 0 {
		h.ReplicasPerChip = 1
	}
	h.typeFromChips()
	return d.finishSlice()
}

// chipsFromPCI takes the chips and their family from the sysfs PCI scan, refusing Google devices of unknown id
// unless the accelerator type is given.
func (d *detector) chipsFromPCI() error {
	h := d.h
	scan, err := scanPCI(h.SysfsRoot)
	if err != nil {
		return err
	}
	found := scanTPUs(scan)
	if len(found.unknown) > 0 && !h.Accelerator.IsSet() {
		return &UnknownDeviceError{Count: len(found.chips), IDs: found.unknown, Location: scan.dir}
	}
	if len(found.chips) > 0 {
		h.Chips, h.ChipsSource, h.Family = found.chips, Sysfs(scan.dir), found.family
		if found.family != "" {
			h.ReplicasPerChip = pciDevices[found.chips[0].DeviceID].ReplicasPerChip
		}
	}
	return nil
}

// chipsFromAccelerator counts the chips from the accelerator type where neither sysfs nor /dev shows them (a
// container that hides them); with no type either, there is no TPU.
func (d *detector) chipsFromAccelerator() error {
	h := d.h
	if len(h.Chips) > 0 {
		return nil
	}
	if !h.Accelerator.IsSet() {
		return &ConfigError{Name: SettingDevice, Value: "tpu", Problem: "was asked for but no TPU chip was found under " +
			h.SysfsRoot + "/bus/pci/devices, " + h.DevRoot + "/accel* or " + h.DevRoot + "/vfio/N",
			Sources: []Source{h.Device.Source}, Hint: "set TPU_ACCELERATOR_TYPE if the chips are hidden from this container, or use the cpu device"}
	}
	for i := range h.Accelerator.V.ChipsPerHost() {
		h.Chips = append(h.Chips, Chip{Index: i})
	}
	h.ChipsSource = DerivedFrom(h.Accelerator.Source)
	d.attachDevNodes()
	return nil
}

// typeFromChips names the single-host slice the chips of a known family make, when nothing named the type.
func (h *Host) typeFromChips() {
	if h.Accelerator.IsSet() || h.Family == "" || len(h.Hostnames.V) > 1 {
		return
	}
	if a, ok := deriveAccelerator(h.Family, len(h.Chips)); ok {
		h.Accelerator = val(a, DerivedFrom(h.ChipsSource))
	}
}

// adoptAccelerator takes the family from a known accelerator type, refusing one that contradicts the chips found.
func (h *Host) adoptAccelerator() error {
	if !h.Accelerator.IsSet() {
		return nil
	}
	if h.Family != "" && h.Family != "v2/v3" && h.Family != "test" && h.Family != h.Accelerator.V.Family.Name {
		return &ConfigError{Name: SettingAcceleratorType, Value: h.Accelerator.V.Type,
			Problem: fmt.Sprintf("contradicts the %d %s chips on this host", len(h.Chips), h.Family),
			Sources: []Source{h.Accelerator.Source, h.ChipsSource}, Hint: "fix or unset " + h.Accelerator.Source.Name}
	}
	h.Family = h.Accelerator.V.Family.Name
	h.ReplicasPerChip = h.Accelerator.V.Family.ReplicasPerChip
	return nil
}

// attachDevNodes gives each chip its device node: /dev/accelN (v2-v4) or /dev/vfio/N (v5e and later).
func (d *detector) attachDevNodes() {
	h := d.h
	style := "vfio"
	if f, ok := families[h.Family]; ok {
		style = f.DevNodes
	} else if h.Family == "v2/v3" {
		style = "accel"
	} else if len(h.Chips) > 0 {
		if p, ok := pciDevices[h.Chips[0].DeviceID]; ok {
			style = p.DevNodes
		}
	}
	nodes := tpuNodes(h.DevRoot, style)
	if len(nodes) == 0 && len(h.Chips) == 0 {
		// No sysfs: chips proven by device nodes alone.
		for _, st := range []string{"accel", "vfio"} {
			if nodes = tpuNodes(h.DevRoot, st); len(nodes) > 0 {
				for i := range nodes {
					h.Chips = append(h.Chips, Chip{Index: i})
				}
				if st == "accel" {
					h.ChipsSource = Dev(h.DevRoot + "/accel*")
				} else {
					h.ChipsSource = Dev(h.DevRoot + "/vfio")
				}
				break
			}
		}
	}
	for i := range h.Chips {
		if i < len(nodes) {
			h.Chips[i].DevNode = nodes[i]
		}
	}
}

// finishSlice derives the bounds and the usable chips, and checks that the slice description holds together.
func (d *detector) finishSlice() error {
	h := d.h
	if h.Accelerator.IsSet() {
		if err := h.boundsFromAccelerator(); err != nil {
			return err
		}
	} else {
		h.boundsFromChips()
	}
	if err := h.checkGivenBounds(); err != nil {
		return err
	}
	if err := h.checkWorkerID(); err != nil {
		return err
	}
	return h.usableChips()
}

// boundsFromAccelerator derives the bounds env and metadata left open from the accelerator type, and checks the
// host list and the chips found against it.
func (h *Host) boundsFromAccelerator() error {
	a := h.Accelerator
	if !h.HostBounds.IsSet() {
		h.HostBounds = val(a.V.HostBounds(), DerivedFrom(a.Source))
	}
	if !h.ChipsPerHostBounds.IsSet() {
		h.ChipsPerHostBounds = val(a.V.ChipsPerHostBounds(), DerivedFrom(a.Source))
	}
	if hosts := a.V.Hosts(); hosts > 1 && h.Hostnames.IsSet() && len(h.Hostnames.V) != hosts {
		return &ConfigError{Name: h.Hostnames.Source.Name, Value: strconv.Quote(strings.Join(h.Hostnames.V, ",")),
			Problem: fmt.Sprintf("lists %d hosts but %s has %d", len(h.Hostnames.V), a.V.Type, hosts),
			Sources: []Source{h.Hostnames.Source, a.Source}, Hint: "list every host of the slice in worker order"}
	}
	if cph := a.V.ChipsPerHost(); h.ChipsSource.Kind == FromSysfs && len(h.Chips) != cph {
		return &ConfigError{Name: SettingAcceleratorType, Value: a.V.Type,
			Problem: fmt.Sprintf("has %d chips per host but this host has %d", cph, len(h.Chips)),
			Sources: []Source{a.Source, h.ChipsSource}, Hint: "fix or unset " + a.Source.Name}
	}
	return nil
}

// boundsFromChips derives the bounds env and metadata left open from the chips alone (no accelerator type): the
// chip grid, and one host unless a host list says otherwise.
func (h *Host) boundsFromChips() {
	if !h.ChipsPerHostBounds.IsSet() {
		if b, err := ChipBounds(len(h.Chips)); err == nil {
			h.ChipsPerHostBounds = val(b, DerivedFrom(h.ChipsSource))
		}
	}
	if !h.HostBounds.IsSet() && len(h.Hostnames.V) <= 1 {
		h.HostBounds = val(Bounds{1, 1, 1}, Default())
	}
}

// checkWorkerID requires this host's index among several hosts, and defaults it to 0 on one.
func (h *Host) checkWorkerID() error {
	if n := len(h.Hostnames.V); n > 1 && !h.WorkerID.IsSet() {
		return &ConfigError{Name: h.Hostnames.Source.Name, Value: strconv.Quote(strings.Join(h.Hostnames.V, ",")),
			Problem: "describes several hosts but nothing says which one this is", Sources: []Source{h.Hostnames.Source},
			Hint: "set TPU_WORKER_ID to this host's index"}
	} else if n > 1 && h.WorkerID.V >= n {
		return &ConfigError{Name: h.WorkerID.Source.Name, Value: strconv.Itoa(h.WorkerID.V),
			Problem: fmt.Sprintf("is not an index of the %d hosts", n),
			Sources: []Source{h.WorkerID.Source, h.Hostnames.Source}, Choices: indexChoices(n)}
	}
	if !h.WorkerID.IsSet() {
		h.WorkerID = val(0, Default())
	}
	return nil
}

// usableChips are the chips this launcher may use: every chip, or the parent's TPU_VISIBLE_CHIPS, limited to the
// first TPU_NUM_DEVICES.
func (h *Host) usableChips() error {
	all := make([]int, len(h.Chips))
	for i := range all {
		all[i] = i
	}
	h.Usable = val(all, h.ChipsSource)
	if h.VisibleChips.IsSet() {
		for _, c := range h.VisibleChips.V {
			if c >= len(h.Chips) {
				return &ConfigError{Name: "TPU_VISIBLE_CHIPS", Value: strconv.Quote(joinInts(h.VisibleChips.V, ",")),
					Problem: fmt.Sprintf("names chip %d but this host has %d chips", c, len(h.Chips)),
					Sources: []Source{h.VisibleChips.Source, h.ChipsSource}, Choices: indexChoices(len(h.Chips))}
			}
		}
		h.Usable = val(h.VisibleChips.V, h.VisibleChips.Source)
	}
	if h.NumDevices.IsSet() {
		n := h.NumDevices.V
		if n > len(h.Usable.V) {
			return &ConfigError{Name: "TPU_NUM_DEVICES", Value: strconv.Itoa(n),
				Problem: fmt.Sprintf("asks for more chips than the %d available", len(h.Usable.V)),
				Sources: []Source{h.NumDevices.Source, h.Usable.Source}, Choices: splitChoices(len(h.Usable.V)), Hint: "or unset it"}
		}
		h.Usable = val(h.Usable.V[:n], h.NumDevices.Source)
	}
	return nil
}

// checkGivenBounds refuses host and chips-per-host bounds given by env or metadata that contradict the hosts and
// chips found: the workers would be handed both (issue 14: TPU_HOST_BOUNDS=2,1,1 on a single-host v5litepod-8).
func (h *Host) checkGivenBounds() error {
	if hb := h.HostBounds; hb.IsSet() && hb.Source.Kind != FromDerived && hb.Source.Kind != FromDefault {
		hosts, what, src := 1, "this host alone (no host list given)", h.ChipsSource
		switch {
		case h.Hostnames.IsSet():
			hosts, what, src = len(h.Hostnames.V), h.Hostnames.Source.Name, h.Hostnames.Source
		case h.Accelerator.IsSet():
			hosts, what, src = h.Accelerator.V.Hosts(), h.Accelerator.V.Type, h.Accelerator.Source
		}
		if p := hb.V.Product(); p != hosts {
			return &ConfigError{Name: hb.Source.Name, Value: hb.V.String(),
				Problem: fmt.Sprintf("describes %d hosts but %s has %d", p, what, hosts),
				Sources: []Source{hb.Source, src}, Hint: "fix or unset " + hb.Source.Name}
		}
	}
	return h.checkGivenChipBounds()
}

// checkGivenChipBounds refuses chips-per-host bounds given by env or metadata that describe neither the host's
// chips nor the parent's TPU_VISIBLE_CHIPS. A process given a subset of a host describes the subset as its host:
// Ray's actor holding 1 or 2 chips gets TPU_CHIPS_PER_HOST_BOUNDS 1,1,1 or 1,2,1, and so does a worker of tpurun's
// own --nprocs 1 run, which may start a tpurun of its own.
func (h *Host) checkGivenChipBounds() error {
	cb := h.ChipsPerHostBounds
	if !cb.IsSet() || cb.Source.Kind == FromDerived || cb.Source.Kind == FromDefault {
		return nil
	}
	chips, src := len(h.Chips), h.ChipsSource
	if h.ChipsSource.Kind == FromDerived && h.Accelerator.IsSet() {
		chips, src = h.Accelerator.V.ChipsPerHost(), h.Accelerator.Source
	}
	p := cb.V.Product()
	if p == chips {
		return nil
	}
	problem := fmt.Sprintf("describes %d chips per host but this host has %d", p, chips)
	sources := []Source{cb.Source, src}
	if vc := h.VisibleChips; vc.IsSet() {
		if p == len(vc.V) {
			return nil
		}
		problem = fmt.Sprintf("describes %d chips per host but this host has %d and %s gives this launcher %d",
			p, chips, vc.Source.Name, len(vc.V))
		sources = append(sources, vc.Source)
	}
	return &ConfigError{Name: cb.Source.Name, Value: cb.V.String(), Problem: problem, Sources: sources,
		Hint: "fix or unset " + cb.Source.Name}
}

func indexChoices(n int) []string {
	out := make([]string, 0, n)
	for i := 0; i < n && i < 16; i++ {
		out = append(out, strconv.Itoa(i))
	}
	if n > 16 {
		out = append(out, fmt.Sprintf("... %d", n-1))
	}
	return out
}

func joinInts(xs []int, sep string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, sep)
}
