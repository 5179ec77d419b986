package topology

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// Doctor is what `tpurun doctor` reports: the detected host, who holds its device nodes, the libtpu lockfile and
// whether the metadata server answers.
type Doctor struct {
	Host     *Host     `json:"host"`
	Holders  []Holder  `json:"holders"`
	Lock     LockState `json:"lockfile"`
	Metadata *Probe    `json:"metadata,omitempty"` // nil when not probed (not a TPU host)
	Problems []string  `json:"problems,omitempty"` // checks that could not run, with why
	// Notes explain the workers' environment where tpurun chose between upstream behaviours (Explain).
	Notes []string `json:"notes,omitempty"`
}

// Diagnose gathers the doctor data for a detected host. It probes the metadata server (within opts.MetadataBudget)
// only on a TPU host; lockfile "" means /tmp/libtpu_lockfile. Its notes explain the default request; a caller
// with the run's request sets d.Notes = Explain(h, req).
func Diagnose(ctx context.Context, h *Host, opts Options, lockfile string) *Doctor {
	d := &Doctor{Host: h, Notes: Explain(h, Request{})}
	if nodes := h.DevNodes(); len(nodes) > 0 {
		hs, err := Holders(h.ProcRoot, nodes)
		if err != nil {
			d.Problems = append(d.Problems, err.Error())
		}
		d.Holders = hs
	}
	if lockfile == "" {
		lockfile = DefaultLockfile
	}
	lk, err := Lockfile(h.ProcRoot, lockfile)
	if err != nil {
		d.Problems = append(d.Problems, err.Error())
	}
	d.Lock = lk
	if h.Device.V == TPU {
		base := opts.MetadataURL
		if base == "" && opts.LookupEnv != nil {
			base, _ = opts.LookupEnv("GCE_METADATA_HOST")
		}
		p := ProbeMetadata(ctx, NewMetadataClient(base, opts.HTTPClient, opts.MetadataBudget, opts.Logger))
		d.Metadata = &p
	}
	return d
}

// WriteDoctor writes the doctor report for people: every detected value with its source, the chips and their
// device nodes, holders, the lockfile and metadata reachability.
func WriteDoctor(w io.Writer, d *Doctor) error {
	h := d.Host
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tVALUE\tSOURCE")
	row := func(name, value string, src Source) {
		if src.IsSet() {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", name, value, src)
		}
	}
	row("device", string(h.Device.V), h.Device.Source)
	row("accelerator type", h.Accelerator.V.Type, h.Accelerator.Source)
	if h.Family != "" {
		row("family", h.Family, h.ChipsSource)
	}
	row("chips on host", fmt.Sprint(len(h.Chips)), h.ChipsSource)
	row("usable chips", counted(len(h.Usable.V), "chip", h.Usable.V), h.Usable.Source)
	row("TPU_NUM_DEVICES", fmt.Sprint(h.NumDevices.V), h.NumDevices.Source)
	row("TPU_VISIBLE_CHIPS (parent)", joinInts(h.VisibleChips.V, ","), h.VisibleChips.Source)
	row("host bounds", h.HostBounds.V.String(), h.HostBounds.Source)
	row("chips per host bounds", h.ChipsPerHostBounds.V.String(), h.ChipsPerHostBounds.Source)
	row("process bounds", h.ProcessBounds.V.String(), h.ProcessBounds.Source)
	row("worker id", fmt.Sprint(h.WorkerID.V), h.WorkerID.Source)
	row("worker hostnames", strings.Join(h.Hostnames.V, ","), h.Hostnames.Source)
	row("SPMD", fmt.Sprint(h.SPMD.V), h.SPMD.Source)
	row("TPU_SKIP_MDS_QUERY (parent)", h.SkipMDS.V, h.SkipMDS.Source)
	if len(h.GPUs) > 0 {
		row("GPUs", fmt.Sprint(len(h.GPUs)), h.GPUSource)
		row("usable GPUs", counted(len(h.UsableGPUs.V), "GPU", h.UsableGPUs.V), h.UsableGPUs.Source)
		row("CUDA_VISIBLE_DEVICES (parent)", strings.Join(h.CUDAVisible.V, ","), h.CUDAVisible.Source)
	}
	keys := make([]string, 0, len(h.Megascale))
	for k := range h.Megascale {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := h.Megascale[k]
		if IsSecret(k) {
			v.V = Redacted
		}
		row(k, v.V, v.Source)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	chips := append(append([]Chip(nil), h.Chips...), h.GPUs...)
	if len(chips) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CHIP\tPCI\tDEVICE ID\tDEVICE NODE\tHELD BY")
		for _, c := range chips {
			var by []string
			for _, x := range d.Holders {
				if x.Path == c.DevNode {
					by = append(by, fmt.Sprintf("pid %d (%s)", x.PID, x.Command))
				}
			}
			held := "-"
			if len(by) > 0 {
				held = strings.Join(by, ", ")
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", c.Index, dash(c.PCI), dash(c.DeviceID), dash(c.DevNode), held)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	switch lk := d.Lock; {
	case !lk.Exists:
		fmt.Fprintf(w, "lockfile %s: absent\n", lk.Path)
	case lk.Held:
		fmt.Fprintf(w, "lockfile %s: HELD by pid %d (%s): libtpu will refuse to start (\"The TPU is already in use by process with pid %d\")\n", lk.Path, lk.PID, lk.Command, lk.PID)
	default:
		fmt.Fprintf(w, "lockfile %s: stale (no process holds it; harmless)\n", lk.Path)
	}
	if h.MetadataErr != nil {
		fmt.Fprintf(w, "metadata during detection: %v\n", h.MetadataErr)
	}
	if p := d.Metadata; p != nil {
		if p.OK {
			fmt.Fprintf(w, "metadata %s: reachable in %s\n", p.URL, p.Elapsed.Round(1e6))
		} else {
			fmt.Fprintf(w, "metadata %s: UNREACHABLE after %s: %s\n", p.URL, p.Elapsed.Round(1e6), p.Err)
		}
	}
	for _, pr := range d.Problems {
		fmt.Fprintf(w, "problem: %s\n", pr)
	}
	for _, n := range d.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// counted renders a count with the indices it counts: "1 (GPU 0)", "4 (chips 0,1,2,3)", "0".
func counted(n int, noun string, idx []int) string {
	switch n {
	case 0:
		return "0"
	case 1:
		return fmt.Sprintf("1 (%s %s)", noun, joinInts(idx, ","))
	}
	return fmt.Sprintf("%d (%ss %s)", n, noun, joinInts(idx, ","))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
