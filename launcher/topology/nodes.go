package topology

// nodes fills NodeHosts and NodeRank (see Host). A TPU host has read the slice's host list and worker id already
// (malformed values failed detection); on other hosts the same variables, then SLURM's, are read here, and a
// malformed one is kept in NodeErr for the run that needs it.
func (d *detector) nodes() {
	h := d.h
	if h.Device.V == TPU {
		if h.Hostnames.IsSet() || h.WorkerID.IsSet() {
			h.NodeHosts, h.NodeRank = h.Hostnames, h.WorkerID
			return
		}
	} else if v, ok := d.lookup("TPU_WORKER_HOSTNAMES"); ok {
		hosts, err := ParseHostList(v)
		if err != nil {
			h.NodeErr = envErr("TPU_WORKER_HOSTNAMES", v, err, "list every host, comma-separated, in node order")
			return
		}
		h.NodeHosts = val(hosts, Env("TPU_WORKER_HOSTNAMES"))
		h.NodeRank, h.NodeErr = d.index("TPU_WORKER_ID", "JOB_COMPLETION_INDEX")
		return
	}
	if v, ok := d.lookup("SLURM_JOB_NODELIST"); ok {
		hosts, err := ParseSlurmNodelist(v)
		if err != nil {
			h.NodeErr = envErr("SLURM_JOB_NODELIST", v, err, "fix the node list, or name the hosts another way")
			return
		}
		h.NodeHosts = val(hosts, Env("SLURM_JOB_NODELIST"))
		h.NodeRank, h.NodeErr = d.index("SLURM_NODEID")
		return
	}
	if h.Device.V != TPU {
		h.NodeRank, h.NodeErr = d.index("TPU_WORKER_ID", "JOB_COMPLETION_INDEX")
	}
}

// index reads the first of names that is set as a node index.
func (d *detector) index(names ...string) (Value[int], error) {
	for _, name := range names {
		if v, ok := d.lookup(name); ok {
			n, err := ParseIndex(v)
			if err != nil {
				return Value[int]{}, envErr(name, v, err, "use this node's index, from 0")
			}
			return val(n, Env(name)), nil
		}
	}
	return Value[int]{}, nil
}
