package hostview

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"tpurun/launcher"
)

// Redacted is what secret values are printed as.
const Redacted = "<redacted>"

// IsSecret reports whether an env var name looks like it holds a secret: its name contains TOKEN, SECRET, KEY or
// PASSWORD (in any case).
func IsSecret(name string) bool {
	u := strings.ToUpper(name)
	return slices.ContainsFunc([]string{"TOKEN", "SECRET", "KEY", "PASSWORD"},
		func(s string) bool { return strings.Contains(u, s) })
}

// RedactEnv returns a copy of env with secret values replaced by Redacted.
func RedactEnv(env map[string]string) map[string]string {
	out := make(map[string]string, len(env))
	for k, v := range env {
		if IsSecret(k) {
			v = Redacted
		}
		out[k] = v
	}
	return out
}

// redacted returns a copy of the plan whose env values are redacted, for printing.
func redacted(p *launcher.DryRun) *launcher.DryRun {
	q := &launcher.DryRun{Device: p.Device, Nodes: p.Nodes}
	for _, w := range p.Workers {
		w.Replicas = slices.Clone(w.Replicas)
		w.Env = RedactEnv(w.Env)
		q.Workers = append(q.Workers, w)
	}
	return q
}

// WritePlanJSON writes the plan as `{"device", "nodes": [...], "workers": [{"rank", "local_rank", "node_rank",
// "replicas", "env": {...}}]}`, secrets redacted, indented.
func WritePlanJSON(w io.Writer, p *launcher.DryRun) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(redacted(p))
}

// WritePlanTable writes the plan for people: one line per node, then one line per worker with its replicas and env
// (sorted, secrets redacted).
func WritePlanTable(w io.Writer, p *launcher.DryRun) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "device: %s  nodes: %d  workers: %d\n", p.Device, len(p.Nodes), len(p.Workers))
	fmt.Fprintln(tw, "NODE\tHOST\tLOCAL WORKERS")
	for _, n := range p.Nodes {
		fmt.Fprintf(tw, "%d\t%s\t%d\n", n.Rank, n.Host, n.LocalWorkers)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "RANK\tNODE\tLOCAL\tREPLICAS\tENV")
	for _, wk := range p.Workers {
		env := RedactEnv(wk.Env)
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(env)) {
			parts = append(parts, k+"="+env[k])
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\n", wk.Rank, wk.NodeRank, wk.LocalRank, joinInts(wk.Replicas),
			strings.Join(parts, " "))
	}
	return tw.Flush()
}
