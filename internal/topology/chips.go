package topology

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"

	"tpurun/internal/failure"
)

// detect detects the chips and the slice of a TPU host.
func (tpu) detect(ctx context.Context, d *detector) error {
	h := d.h
	h.state = &TPUFacts{}
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
	h.ReplicasPerChip = cmp.Or(h.ReplicasPerChip, 1)
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
	found, t := scanTPUs(scan), h.tpu()
	if len(found.unknown) > 0 && !t.Accelerator.IsSet() {
		return &UnknownDeviceError{Count: len(found.chips), IDs: found.unknown, Location: scan.dir}
	}
	if len(found.chips) > 0 {
		t.Chips, t.ChipsSource, t.Family = found.chips, Sysfs(scan.dir), found.family
		if found.family != "" {
			h.ReplicasPerChip = pciDevices[found.chips[0].DeviceID].ReplicasPerChip
		}
	}
	return nil
}

// chipsFromAccelerator counts the chips from the accelerator type where neither sysfs nor /dev shows them.
func (d *detector) chipsFromAccelerator() error {
	h, t := d.h, d.h.tpu()
	if len(t.Chips) > 0 {
		return nil
	}
	if !t.Accelerator.IsSet() {
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.Device, Value: "tpu", Problem: "was asked for but no TPU chip was found under " +
			h.SysfsRoot + "/bus/pci/devices, " + h.DevRoot + "/accel* or " + h.DevRoot + "/vfio/N",
			Sources: sources{h.Device.Source}, Hint: "set TPU_ACCELERATOR_TYPE if the chips are hidden from this container, or use the cpu device"}
	}
	for i := range t.Accelerator.V.ChipsPerHost() {
		t.Chips = append(t.Chips, Chip{Index: i})
	}
	t.ChipsSource = DerivedFrom(t.Accelerator.Source)
	d.attachDevNodes()
	return nil
}

// typeFromChips names the single-host slice the chips of a known family make, when nothing named the type.
func (h *Host) typeFromChips() {
	t := h.tpu()
	if t.Accelerator.IsSet() || t.Family == "" || len(t.Hostnames.V) > 1 {
		return
	}
	if a, ok := deriveAccelerator(t.Family, len(t.Chips)); ok {
		t.Accelerator = val(a, DerivedFrom(t.ChipsSource))
	}
}

// adoptAccelerator takes the family from a known accelerator type, refusing one that contradicts the chips found.
func (h *Host) adoptAccelerator() error {
	t := h.tpu()
	if !t.Accelerator.IsSet() {
		return nil
	}
	// Only a family that an accelerator type names can contradict one: not the ids that name several (v2/v3) or none.
	if _, named := families[t.Family]; named && t.Family != t.Accelerator.V.Family.Name {
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.AcceleratorType, Value: t.Accelerator.V.Type,
			Problem: fmt.Sprintf("contradicts the %d %s chips on this host", len(t.Chips), t.Family),
			Sources: sources{t.Accelerator.Source, t.ChipsSource}, Hint: "fix or unset " + t.Accelerator.Source.Name}
	}
	t.Family = t.Accelerator.V.Family.Name
	h.ReplicasPerChip = t.Accelerator.V.Family.ReplicasPerChip
	return nil
}

// attachDevNodes gives each chip its device node: /dev/accelN (v2-v4) or /dev/vfio/N (v5e and later).
func (d *detector) attachDevNodes() {
	h, t := d.h, d.h.tpu()
	f := families[t.Family]
	if len(t.Chips) > 0 { // the PCI id's row(s), which also know v2/v3 and the testing chip
		if p, ok := pciDevices[t.Chips[0].DeviceID]; ok {
			f = p
		}
	}
	nodes := tpuNodes(h.DevRoot, cmp.Or(f.DevNodes, "vfio"))
	if len(nodes) == 0 && len(t.Chips) == 0 {
		// No sysfs: chips proven by device nodes alone.
		for _, st := range [][2]string{{"accel", "/accel*"}, {"vfio", "/vfio"}} {
			if nodes = tpuNodes(h.DevRoot, st[0]); len(nodes) > 0 {
				for i := range nodes {
					t.Chips = append(t.Chips, Chip{Index: i})
				}
				t.ChipsSource = Dev(h.DevRoot + st[1])
				break
			}
		}
	}
	for i := range min(len(t.Chips), len(nodes)) {
		t.Chips[i].DevNode = nodes[i]
	}
}

// finishSlice derives the bounds and the usable chips, and checks that the slice description holds together.
func (d *detector) finishSlice() error {
	h := d.h
	var err error
	if h.tpu().Accelerator.IsSet() {
		err = h.boundsFromAccelerator()
	} else {
		h.boundsFromChips()
	}
	return cmp.Or(err, h.checkGivenBounds(), h.checkWorkerID(), h.usableChips()) // the first error
}

// boundsFromAccelerator derives the bounds left open from the accelerator type, and checks the hosts and chips.
func (h *Host) boundsFromAccelerator() error {
	t := h.tpu()
	a := t.Accelerator
	if !t.HostBounds.IsSet() {
		t.HostBounds = val(a.V.HostBounds(), DerivedFrom(a.Source))
	}
	if !t.ChipsPerHostBounds.IsSet() {
		t.ChipsPerHostBounds = val(a.V.ChipsPerHostBounds(), DerivedFrom(a.Source))
	}
	if hosts := a.V.Hosts(); hosts > 1 && t.Hostnames.IsSet() && len(t.Hostnames.V) != hosts {
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named(t.Hostnames.Source.Name), Value: strconv.Quote(strings.Join(t.Hostnames.V, ",")),
			Problem: fmt.Sprintf("lists %d hosts but %s has %d", len(t.Hostnames.V), a.V.Type, hosts),
			Sources: sources{t.Hostnames.Source, a.Source}, Hint: "list every host of the slice in worker order"}
	}
	if cph := a.V.ChipsPerHost(); t.ChipsSource.Kind == FromSysfs && len(t.Chips) != cph {
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.AcceleratorType, Value: a.V.Type,
			Problem: fmt.Sprintf("has %d chips per host but this host has %d", cph, len(t.Chips)),
			Sources: sources{a.Source, t.ChipsSource}, Hint: "fix or unset " + a.Source.Name}
	}
	return nil
}

// boundsFromChips derives the bounds left open from the chips alone: one host unless a host list says otherwise.
func (h *Host) boundsFromChips() {
	t := h.tpu()
	if !t.ChipsPerHostBounds.IsSet() {
		if b, err := ChipBounds(len(t.Chips)); err == nil {
			t.ChipsPerHostBounds = val(b, DerivedFrom(t.ChipsSource))
		}
	}
	if !t.HostBounds.IsSet() && len(t.Hostnames.V) <= 1 {
		t.HostBounds = val(Bounds{1, 1, 1}, Default())
	}
}

// checkWorkerID requires this host's index among several hosts, and defaults it to 0 on one.
func (h *Host) checkWorkerID() error {
	t := h.tpu()
	if n := len(t.Hostnames.V); n > 1 && !t.WorkerID.IsSet() {
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named(t.Hostnames.Source.Name), Value: strconv.Quote(strings.Join(t.Hostnames.V, ",")),
			Problem: "describes several hosts but nothing says which one this is", Sources: sources{t.Hostnames.Source},
			Hint: "set TPU_WORKER_ID to this host's index"}
	} else if n > 1 && t.WorkerID.V >= n {
		return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named(t.WorkerID.Source.Name),
			Value: strconv.Itoa(t.WorkerID.V), Problem: fmt.Sprintf("is not an index of the %d hosts", n),
			Sources: sources{t.WorkerID.Source, t.Hostnames.Source}, Choices: indexChoices(n)}
	}
	if !t.WorkerID.IsSet() {
		t.WorkerID = val(0, Default())
	}
	return nil
}

// usableChips are the chips this launcher may use: every chip, or the parent's TPU_VISIBLE_CHIPS, limited to the
// first TPU_NUM_DEVICES.
func (h *Host) usableChips() error {
	t := h.tpu()
	t.Usable = val(indices(len(t.Chips)), t.ChipsSource)
	if t.VisibleChips.IsSet() {
		for _, c := range t.VisibleChips.V {
			if c >= len(t.Chips) {
				return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named("TPU_VISIBLE_CHIPS"), Value: strconv.Quote(joinInts(t.VisibleChips.V, ",")),
					Problem: fmt.Sprintf("names chip %d but this host has %d chips", c, len(t.Chips)),
					Sources: sources{t.VisibleChips.Source, t.ChipsSource}, Choices: indexChoices(len(t.Chips))}
			}
		}
		t.Usable = val(t.VisibleChips.V, t.VisibleChips.Source)
	}
	if t.NumDevices.IsSet() {
		n := t.NumDevices.V
		if n > len(t.Usable.V) {
			return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named("TPU_NUM_DEVICES"), Value: strconv.Itoa(n),
				Problem: fmt.Sprintf("asks for more chips than the %d available", len(t.Usable.V)),
				Sources: sources{t.NumDevices.Source, t.Usable.Source}, Choices: splitChoices(len(t.Usable.V)), Hint: "or unset it"}
		}
		t.Usable = val(t.Usable.V[:n], t.NumDevices.Source)
	}
	return nil
}

// checkGivenBounds refuses given host and chips-per-host bounds that contradict the hosts and chips found, which
// the workers would be handed both of (TPU_HOST_BOUNDS=2,1,1 on a single-host v5litepod-8).
func (h *Host) checkGivenBounds() error {
	t := h.tpu()
	if hb := t.HostBounds; given(hb.Source) {
		hosts, what, src := 1, "this host alone (no host list given)", t.ChipsSource
		switch {
		case t.Hostnames.IsSet():
			hosts, what, src = len(t.Hostnames.V), t.Hostnames.Source.Name, t.Hostnames.Source
		case t.Accelerator.IsSet():
			hosts, what, src = t.Accelerator.V.Hosts(), t.Accelerator.V.Type, t.Accelerator.Source
		}
		if p := hb.V.Product(); p != hosts {
			return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named(hb.Source.Name), Value: hb.V.String(),
				Problem: fmt.Sprintf("describes %d hosts but %s has %d", p, what, hosts),
				Sources: sources{hb.Source, src}, Hint: "fix or unset " + hb.Source.Name}
		}
	}
	return h.checkGivenChipBounds()
}

// checkGivenChipBounds refuses given chips-per-host bounds that describe neither the host's chips nor the
// parent's TPU_VISIBLE_CHIPS (a subset of a host describes itself as a host: Ray's actors, --nprocs 1's worker).
func (h *Host) checkGivenChipBounds() error {
	t := h.tpu()
	cb := t.ChipsPerHostBounds
	if !given(cb.Source) {
		return nil
	}
	chips, src := len(t.Chips), t.ChipsSource
	if t.ChipsSource.Kind == FromDerived && t.Accelerator.IsSet() {
		chips, src = t.Accelerator.V.ChipsPerHost(), t.Accelerator.Source
	}
	p := cb.V.Product()
	if p == chips {
		return nil
	}
	problem := fmt.Sprintf("describes %d chips per host but this host has %d", p, chips)
	from := sources{cb.Source, src}
	if vc := t.VisibleChips; vc.IsSet() {
		if p == len(vc.V) {
			return nil
		}
		problem = fmt.Sprintf("describes %d chips per host but this host has %d and %s gives this launcher %d",
			p, chips, vc.Source.Name, len(vc.V))
		from = append(from, vc.Source)
	}
	return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named(cb.Source.Name), Value: cb.V.String(),
		Problem: problem, Sources: from, Hint: "fix or unset " + cb.Source.Name}
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

// indices are 0..n-1.
func indices(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
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
