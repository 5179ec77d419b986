package hostview

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"tpurun/internal/topology"

	"go.uber.org/zap"
)

// Doctor is what `tpurun doctor` reports: the detected host, who holds its device nodes, the libtpu lockfile and
// whether the metadata server answers.
type Doctor struct {
	Host     *topology.Host     `json:"host"`
	Holders  []topology.Holder  `json:"holders"`
	Lock     topology.LockState `json:"lockfile"`
	Metadata *topology.Probe    `json:"metadata,omitempty"` // nil when not probed (not a TPU host)
	Problems []string           `json:"problems,omitempty"` // checks that could not run, with why
	// Notes explain the workers' environment where tpurun chose between upstream behaviours (Explain).
	Notes []string `json:"notes,omitempty"`
	// Job is the job this host's environment says it is one host of, which a plain run joins (Host.JobLayout);
	// JobError why that environment is inconsistent (a run would exit 2).
	Job      *topology.JobLayout `json:"job,omitempty"`
	JobError string              `json:"job_error,omitempty"`
}

// Diagnose gathers the doctor data for a detected host. It probes the metadata server (within opts.MetadataBudget)
// only on a TPU host, and checks libtpu's lockfile at lockfile. Its notes explain the default request; a caller
// with the run's request sets d.Notes = Explain(h, req).
func Diagnose(ctx context.Context, h *topology.Host, opts topology.Options, lockfile string, log *zap.Logger) *Doctor {
	d := &Doctor{Host: h, Notes: Explain(h, topology.Request{})}
	d.SetJob(h.JobLayout(topology.Request{}))
	if nodes := h.DevNodes(); len(nodes) > 0 {
		hs, err := topology.Holders(h.ProcRoot, nodes)
		if err != nil {
			d.Problems = append(d.Problems, err.Error())
		}
		d.Holders = hs
	}
	lk, err := topology.Lockfile(h.ProcRoot, lockfile)
	if err != nil {
		d.Problems = append(d.Problems, err.Error())
	}
	d.Lock = lk
	d.Metadata = h.Probe(ctx, opts, log)
	return d
}

// SetJob records the job the host's environment describes for the run's request, or why it cannot be laid out.
func (d *Doctor) SetJob(l *topology.JobLayout, err error) {
	d.Job, d.JobError = l, ""
	if err != nil {
		d.JobError = err.Error()
	}
}

// writeJob says where this host stands in the job its environment describes, and where a plain run meets the
// other hosts.
func writeJob(w io.Writer, d *Doctor) {
	switch {
	case d.JobError != "":
		fmt.Fprintf(w, "job: a run would exit 2: %s\n", d.JobError)
	case d.Job != nil:
		l := d.Job
		fmt.Fprintf(w, "job: this host is %s: node %d of %d; a plain run meets the others at %s on the rendezvous port, --nnodes 1 runs it alone\n",
			l, l.NodeRank(), l.NNodes(), l.Coordinator)
	}
}

// WriteDoctor writes the doctor report for people: every detected value with its source, the chips and their
// device nodes, holders, the lockfile and metadata reachability.
func WriteDoctor(w io.Writer, d *Doctor) error {
	if err := writeSettings(w, d.Host); err != nil {
		return err
	}
	writeJob(w, d)
	if err := writeDevices(w, d); err != nil {
		return err
	}
	fmt.Fprintln(w)
	writeLockfile(w, d.Lock)
	writeChecks(w, d)
	return nil
}

// writeSettings writes the host's settings that have a source, secrets redacted.
func writeSettings(w io.Writer, h *topology.Host) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tVALUE\tSOURCE")
	for _, s := range h.Settings() {
		if s.Source.IsSet() {
			if IsSecret(s.Name) {
				s.Value = Redacted
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, s.Value, s.Source)
		}
	}
	return tw.Flush()
}

// writeDevices writes the host's chips (or GPUs) with their device nodes and the processes that hold them.
func writeDevices(w io.Writer, d *Doctor) error {
	chips := d.Host.Chips()
	if len(chips) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHIP\tPCI\tDEVICE ID\tDEVICE NODE\tHELD BY")
	for _, c := range chips {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", c.Index, dash(c.PCI), dash(c.DeviceID), dash(c.DevNode), heldBy(d.Holders, c.DevNode))
	}
	return tw.Flush()
}

// heldBy names the holders of a device node: "pid 12 (python3 train.py), ...", or "-".
func heldBy(holders []topology.Holder, node string) string {
	var by []string
	for _, x := range holders {
		if x.Path == node {
			by = append(by, fmt.Sprintf("pid %d (%s)", x.PID, x.Command))
		}
	}
	if len(by) == 0 {
		return "-"
	}
	return strings.Join(by, ", ")
}

// writeLockfile writes the state of libtpu's lockfile.
func writeLockfile(w io.Writer, lk topology.LockState) {
	switch {
	case !lk.Exists:
		fmt.Fprintf(w, "lockfile %s: absent\n", lk.Path)
	case lk.Held:
		fmt.Fprintf(w, "lockfile %s: HELD by pid %d (%s): libtpu will refuse to start (\"The TPU is already in use by process with pid %d\")\n", lk.Path, lk.PID, lk.Command, lk.PID)
	default:
		fmt.Fprintf(w, "lockfile %s: stale (no process holds it; harmless)\n", lk.Path)
	}
}

// writeChecks writes the metadata server's answers, the checks that could not run and the notes.
func writeChecks(w io.Writer, d *Doctor) {
	if err := d.Host.MetadataErr; err != nil {
		fmt.Fprintf(w, "metadata during detection: %v\n", err)
	}
	if p := d.Metadata; p != nil && p.OK {
		fmt.Fprintf(w, "metadata %s: reachable in %s\n", p.URL, p.Elapsed.Round(1e6))
	} else if p != nil {
		fmt.Fprintf(w, "metadata %s: UNREACHABLE after %s: %s\n", p.URL, p.Elapsed.Round(1e6), p.Err)
	}
	for _, pr := range d.Problems {
		fmt.Fprintf(w, "problem: %s\n", pr)
	}
	for _, n := range d.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
