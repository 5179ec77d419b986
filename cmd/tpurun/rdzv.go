package main

import (
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"tpurun/launcher"
)

// rdzvFlags are the multi-host flags (torchrun's names plus tpurun's). They are registered only when nobody
// registered them before (the torchrun-compat flags may define --nnodes, --node-rank and --rdzv-*), and read back
// from the flag set after parsing, whoever defined them.
type rdzvFlags struct {
	fs *pflag.FlagSet
}

// addRdzvFlags registers the multi-host flags that fs does not have yet; call it after every other flag.
func addRdzvFlags(fs *pflag.FlagSet) *rdzvFlags {
	str := func(name, def, usage string) {
		if fs.Lookup(name) == nil {
			fs.String(name, def, usage)
		}
	}
	str("nnodes", "1", "number of nodes (hosts) of the job; N or N:N")
	str("node-rank", "-1", "this node's rank (default: assigned by the rendezvous, or from TPU_WORKER_ID / SLURM_NODEID)")
	str("rdzv-backend", "", "multi-host rendezvous: static, tcp or etcd (default static when --nnodes > 1 without --rdzv-endpoint, else tcp)")
	str("rdzv-endpoint", "", "tcp/static: host:port of the embedded server (node 0); etcd: host:2379[,host:2379...]")
	str("rdzv-id", "", "run id shared by every node (default: --run-id)")
	str("rdzv-conf", "", "key=value,...: join_timeout, heartbeat, is_host, port, hosts, prefix, linger")
	str("rdzv-timeout", "", "how long to wait for every node to join, e.g. 5m (default 5m)")
	str("rdzv-token", "", "shared secret every rendezvous message carries (or env TPURUN_RDZV_TOKEN); required off loopback")
	str("node-name", "", "this node's identity in the rendezvous (default: the hostname)")
	str("node-addr", "", "the address other nodes reach this node at (default: the local address toward the endpoint)")
	str("num-slices", "", "multi-slice: number of slices (or MEGASCALE_NUM_SLICES)")
	str("slice-id", "", "multi-slice: this node's slice (or MEGASCALE_SLICE_ID)")
	return &rdzvFlags{fs: fs}
}

func (r *rdzvFlags) get(name string) string {
	if r == nil || r.fs == nil {
		return ""
	}
	f := r.fs.Lookup(name)
	if f == nil {
		return ""
	}
	return strings.TrimSpace(f.Value.String())
}

func (r *rdzvFlags) changed(name string) bool {
	f := r.fs.Lookup(name)
	return f != nil && f.Changed
}

// nnodes parses --nnodes: N, or torchrun's MIN:MAX with MIN == MAX.
func (r *rdzvFlags) nnodes() (int, error) { return launcher.ParseNNodes(r.get("nnodes")) }

// enabled reports whether this run is multi-host: a rendezvous backend or more than one node was asked for.
func (r *rdzvFlags) enabled() bool {
	if r == nil {
		return false
	}
	n, err := r.nnodes()
	set := func(name string) bool { return r.changed(name) && r.get(name) != "" } // --standalone sets them empty
	return set("rdzv-backend") || set("rdzv-endpoint") || err != nil || n > 1
}

// intFlag reads an optional whole-number flag, falling back to the env var; def when neither is set.
func (r *rdzvFlags) intFlag(name, env string, def int) (int, error) {
	v, from := r.get(name), "--"+name
	if !r.changed(name) {
		v, from = os.Getenv(env), env
	}
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, &launcher.ConfigError{Field: from, Value: v, Hint: "need a whole number"}
	}
	return n, nil
}

// spec is the rendezvous of the job from the flags and the environment: the zero value (a world of one) unless a
// backend, an endpoint or more than one node was asked for.
func (r *rdzvFlags) spec() (launcher.RendezvousSpec, error) {
	if !r.enabled() {
		return launcher.RendezvousSpec{}, nil
	}
	c := launcher.RendezvousSpec{Endpoint: r.get("rdzv-endpoint"), RunID: r.get("rdzv-id"), NodeRank: -1,
		Conf: r.get("rdzv-conf"), NodeName: r.get("node-name"), NodeAddr: r.get("node-addr")}
	var err error
	if c.NNodes, err = r.nnodes(); err != nil {
		return c, err
	}
	if !r.changed("nnodes") && r.get("nnodes") == "1" {
		c.NNodes = 0 // static: from the host list
	}
	if r.changed("node-rank") {
		if c.NodeRank, err = strconv.Atoi(r.get("node-rank")); err != nil || c.NodeRank < -1 {
			return c, &launcher.ConfigError{Field: "--node-rank", Value: r.get("node-rank"), Hint: "need a whole number from 0 (or -1 for any)"}
		}
	}
	if c.RunID == "" {
		c.RunID = r.get("run-id")
	}
	if c.RunID == "" {
		return c, &launcher.ConfigError{Field: "--rdzv-id", Value: "", Hint: "a multi-host run needs the same run id on every node: pass --rdzv-id or --run-id"}
	}
	c.Backend = r.get("rdzv-backend")
	if !r.changed("rdzv-backend") || c.Backend == "" {
		c.Backend = "static"
		if c.Endpoint != "" {
			c.Backend = "tcp"
		}
	}
	if v := r.get("rdzv-timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			var s int
			if s, err = strconv.Atoi(v); err == nil {
				d = time.Duration(s) * time.Second
			}
		}
		if err != nil || d < 0 {
			return c, &launcher.ConfigError{Field: "--rdzv-timeout", Value: v, Hint: "need a positive duration such as 90s or 5m"}
		}
		c.Timeout = d // 0: the default
	}
	c.Token = r.get("rdzv-token")
	if c.Token == "" {
		c.Token = os.Getenv("TPURUN_RDZV_TOKEN")
	}
	if c.NumSlices, err = r.intFlag("num-slices", "MEGASCALE_NUM_SLICES", 1); err != nil {
		return c, err
	}
	if c.SliceID, err = r.intFlag("slice-id", "MEGASCALE_SLICE_ID", 0); err != nil {
		return c, err
	}
	return c, nil
}
