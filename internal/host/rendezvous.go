package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"

	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/internal/spec"
	"tpurun/internal/topology"
	"tpurun/rendezvous"
	// The backends every launcher links, each registering itself: static is named by discovery; etcd's is linked
	// by the programs that import it (tpurun-etcd).
	_ "tpurun/rendezvous/tcp"
)

// resolveRendezvous fills in what the rendezvous spec leaves to the environment, as detection read it once: the
// slice setting (MEGASCALE_NUM_SLICES, MEGASCALE_SLICE_ID) and the token (TPURUN_RDZV_TOKEN).
func (p *Prepared) resolveRendezvous() error {
	if err := p.discover(); err != nil {
		return err
	}
	r := &p.spec.Rendezvous
	if p.solo = r.Solo(); p.solo {
		return nil
	}
	if r.Token == "" {
		r.Token = spec.LookupEnv(p.spec.Env, "TPURUN_RDZV_TOKEN")
	}
	for _, v := range []struct {
		name       string
		dst        *int
		unset, def int
	}{{topology.EnvMegascaleNumSlices, &r.NumSlices, 0, 1}, {topology.EnvMegascaleSliceID, &r.SliceID, -1, 0}} {
		if *v.dst != v.unset {
			continue
		}
		*v.dst = v.def
		if p.Host == nil {
			continue
		}
		if val, ok := p.Host.Megascale()[v.name]; ok {
			n, err := topology.ParseMegascale(v.name, val.V)
			if err != nil {
				return &failure.ConfigError{Field: failure.Named(v.name), Value: val.V, Hint: "need a whole number from 0 (or unset it)"}
			}
			*v.dst = n
		}
	}
	return r.Validate()
}

// OpenRendezvous opens the backend of the job's rendezvous spec as Prepare resolved it (discovery, the token from
// the environment): the world of one, or the real one configured from it and the hosts detection found (static).
func (p *Prepared) OpenRendezvous(ctx context.Context) (*rendezvous.Rendezvous, error) {
	r, runID, h := p.spec.Rendezvous, p.spec.RunID, p.Host
	if p.solo { // it reads none of the settings: validateSolo checked those a world of one keeps
		return rendezvous.New(ctx, rendezvous.Config{Backend: r.Backend, Logger: p.Log})
	}
	c := r.Config
	c.Logger, c.RunID = p.Log, cmp.Or(c.RunID, runID)
	if err := place(&c, h); err != nil {
		return nil, err
	}
	if p.Layout != nil && p.Layout.Slices > 1 { // a slice's host list names only that slice's nodes: no host list
		c.Hosts = nil
	}
	rz, err := rendezvous.New(ctx, c)
	if errors.Is(err, rendezvous.ErrNoToken) {
		return nil, fmt.Errorf("%w; give every node the same secret: TPURUN_RDZV_TOKEN=SECRET in its environment, or --rdzv-token SECRET "+
			"(tpurun asks for one on an endpoint you name; torchrun's --master-addr line, and a TPU slice's hosts meeting by themselves, run without one, with a warning)", err)
	}
	if err == nil && rz.Unauthenticated() {
		p.Log.Warn("the rendezvous runs without a token, as torchrun's does: anyone who can reach "+rz.Endpoint()+" can join this job; "+
			"give every node the same TPURUN_RDZV_TOKEN=SECRET (or --rdzv-token SECRET) to require one", zap.String("endpoint", rz.Endpoint()))
	}
	return rz, err
}

// place sets the host list the rendezvous gets and the node rank of a fixed (static) world: the hosts option,
// else what detection read (Host.NodeHosts, Host.NodeRank: TPU_WORKER_HOSTNAMES, SLURM_JOB_NODELIST, ...). A node
// rank that was set wins. An elastic backend (tcp, etcd) takes only the host list (its first host names the
// default tcp endpoint) and assigns ranks itself. A malformed host list stops only a run whose backend needs it.
func place(c *rendezvous.Config, h *topology.Host) error {
	b, err := rendezvous.Lookup(c.Backend)
	if err != nil {
		return err
	}
	var rank topology.Value[int]
	if h != nil {
		c.Hosts, rank = h.NodeHosts.V, h.NodeRank
		if h.NodeErr != nil && b.NeedsHosts(c) && c.Conf["hosts"] == "" {
			return h.NodeErr
		}
	}
	if v := c.Conf["hosts"]; v != "" {
		if c.Hosts, err = topology.ParseHostList(v); err != nil {
			return &failure.ConfigError{Field: failure.RendezvousHostsOption, Value: v, Hint: err.Error()}
		}
	}
	if c.NodeRank < 0 && rank.IsSet() && !b.Elastic() { // a fixed world's ranks come with the launch
		c.NodeRank = rank.V
	}
	return nil
}

// Member is what this node brings to the join of generation g.
func (p *Prepared) Member(rz *rendezvous.Rendezvous, g int) (rendezvous.Member, error) {
	r := p.spec.Rendezvous
	slice := p.device().Kind().FixedSlice()
	m := rendezvous.Member{Instance: p.instance, Host: r.NodeName, Addr: r.NodeAddr, LocalWorkers: p.LocalWorkers,
		Accelerator: p.Accelerator, RunID: p.spec.RunID, SliceID: r.SliceID, NumSlices: max(r.NumSlices, 1),
		Rank: r.NodeRank, Generation: g, Ports: p.Ports, UnevenWorkers: !slice, Role: p.spec.Role}
	// A static world named by a host list takes each node's name and address from it; otherwise a node names itself
	// (rendezvous.Self: the benchmark's nodes are named by the same code).
	m, err := rz.Self(m, os.Hostname, os.Getpid())
	if err != nil {
		return m, fmt.Errorf("%w: %w", failure.ErrInternal, err)
	}
	return m, nil
}

// device is what this node runs on: the detected device, or a ready plan's.
func (p *Prepared) device() topology.Device {
	if p.Host != nil {
		return p.Host.Device.V
	}
	return p.Plan.Device
}
