package launcher

import (
	"context"
	"strings"
	"tpurun/internal/attempt"

	"tpurun/internal/console"
	"tpurun/internal/spec"
	"tpurun/internal/topology"
	"tpurun/rendezvous"
)

// internal is the one conversion of a public Spec into the Spec the launcher's inside reads; the adjustment ctx
// carries (spec.WithAdjust: the command line's and the tests' route to what the public Spec leaves out) comes last.
// The error is a malformed Rendezvous.Conf entry's (ErrConfig).
func (s Spec) internal(ctx context.Context) (spec.Spec, error) {
	d, r, o, p := s.Devices, s.Rendezvous, s.Output, s.Process
	conf, err := rendezvous.ParseConf(strings.Join(r.Conf, ","))
	is := spec.Spec{
		Options: attempt.Options{Program: s.Program, Env: s.Env, Dir: s.Dir, RunID: s.RunID, Role: s.Role,
			SweepTag: p.SweepTag, Grace: s.Grace, Timeout: s.Timeout, MaxRestarts: s.MaxRestarts,
			DrainTimeout: s.DrainTimeout, LogDir: o.LogDir, Redirects: o.Redirects.internal(), Tee: o.Tee.internal(),
			LocalRanksFilter: o.LocalRanks, LogPrefix: o.Prefix, RawOutput: o.Raw, Stdin: o.Stdin,
			StdinTo: console.StdinMode(o.StdinTo), SweepSubtree: p.SweepSubtree},
		Preload: s.Preload,
		Detect: topology.Options{Device: d.Device, AcceleratorType: d.AcceleratorType, SPMD: d.SPMD,
			MetadataBudget: d.MetadataTimeout},
		Request: topology.Request{NProcs: d.NProcs, SPMD: d.SPMD, TPUPortBase: d.TPUPortBase, IsolateGPUs: d.IsolateGPUs},
		PerCPU:  d.PerCPU, Force: d.Force,
		Rendezvous: spec.RendezvousSpec{Config: rendezvous.Config{Backend: r.Backend, Endpoint: r.Endpoint,
			RunID: r.RunID, NNodes: r.NNodes, MinNodes: r.MinNodes, NodeRank: r.NodeRank, Conf: conf,
			Timeout: r.Timeout, Token: r.Token, AllowUnauthenticated: r.AllowUnauthenticated},
			NodeName: r.NodeName, NodeAddr: r.NodeAddr, NumSlices: r.NumSlices, SliceID: r.SliceID, Alone: r.Alone},
		MasterAddr: s.MasterAddr, MasterPort: s.MasterPort, Stdout: o.Stdout, Stderr: o.Stderr,
		Results: spec.ResultsSpec{Required: s.Results.Required, MaxFrameBytes: s.Results.MaxFrameBytes,
			File: s.Results.File, Document: s.Results.Document},
		Logger: s.Logger, SampleInterval: s.SampleInterval, Signals: p.Signals, CatchSignals: p.CatchSignals, Reap: p.Reap,
	}
	if r.NumSlices == 0 {
		is.Rendezvous.SliceID = -1 // from the environment
	}
	if f := s.Function; f != nil {
		is.Fn = &spec.FnSpec{Target: f.Target, ArgsJSON: f.ArgsJSON, Args: f.Args, Python: f.Python}
	}
	if len(s.Observers) > 0 {
		is.Observers = []spec.Observer{observers(s.Observers)}
	}
	spec.Adjust(ctx, &is)
	return is, err
}

func (st Streams) internal() console.StdSpec {
	out := console.StdSpec{All: console.Std(st.All)}
	if st.PerRank != nil {
		out.PerRank = make(map[int]console.Std, len(st.PerRank))
		for r, v := range st.PerRank {
			out.PerRank[r] = console.Std(v)
		}
	}
	return out
}
