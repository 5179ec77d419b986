package topology

// envNodes fills NodeHosts and NodeRank (see Host) on a host that is not a TPU, from the same variables a TPU slice
// is described by (TPU_WORKER_HOSTNAMES, TPU_WORKER_ID, JOB_COMPLETION_INDEX), else SLURM's. A malformed one is kept
// in NodeErr for the run that needs it. (A TPU host has read them already, and malformed values failed detection.)
func (d *detector) envNodes() {
	h := d.h
	if v, ok := d.lookup("TPU_WORKER_HOSTNAMES"); ok {
		hosts, err := ParseHostList(v)
		if err != nil {
			h.NodeErr = envErr("TPU_WORKER_HOSTNAMES", v, err, "list every host, comma-separated, in node order")
			return
		}
		h.NodeHosts = val(hosts, Env("TPU_WORKER_HOSTNAMES"))
		h.NodeRank, h.NodeErr = d.index("TPU_WORKER_ID", "JOB_COMPLETION_INDEX")
		return
	}
	if d.slurmNodes() {
		return
	}
	h.NodeRank, h.NodeErr = d.index("TPU_WORKER_ID", "JOB_COMPLETION_INDEX")
}

// slurmNodes fills NodeHosts and NodeRank from SLURM_JOB_NODELIST and SLURM_NODEID, reporting whether the list is
// set.
func (d *detector) slurmNodes() bool {
	h := d.h
	v, ok := d.lookup("SLURM_JOB_NODELIST")
	if !ok {
		return false
	}
	hosts, err := ParseSlurmNodelist(v)
	if err != nil {
		h.NodeErr = envErr("SLURM_JOB_NODELIST", v, err, "fix the node list, or name the hosts another way")
		return true
	}
	h.NodeHosts = val(hosts, Env("SLURM_JOB_NODELIST"))
	h.NodeRank, h.NodeErr = d.index("SLURM_NODEID")
	return true
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
