package launcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"tpurun/internal/failure"
	"tpurun/internal/spec"
	"tpurun/internal/topology"
	"tpurun/internal/workerenv"
)

// DryRun is what Run would start for a Spec, world-wide, as Plan finds it: the nodes, every worker with the
// environment it would get (the device's variables and torchrun's: RANK, WORLD_SIZE, MASTER_ADDR, ...; values a
// run only knows when it starts are placeholders), and what a run would say about this host. Its JSON is what
// `tpurun plan --format json` prints (which redacts secrets).
type DryRun struct {
	Device  string          `json:"device"` // "tpu", "gpu" or "cpu"
	Nodes   []PlannedNode   `json:"nodes"`
	Workers []PlannedWorker `json:"workers"` // in rank order

	Node         int      `json:"-"` // this host's node rank
	DeviceSource string   `json:"-"` // where the device came from (a flag, the environment, sysfs, ...)
	Notes        []string `json:"-"` // what a run would note: planned from sysfs alone, GPUs shared, ...
	// Refusal, when set, is why a run would refuse to start (another process holds a chip) unless Devices.Force.
	Refusal error `json:"-"`
}

// PlannedNode is one node of the world.
type PlannedNode struct {
	Rank         int    `json:"rank"`
	Host         string `json:"host"`
	LocalWorkers int    `json:"local_workers"`
}

// PlannedWorker is one worker of the world: its ranks, the replicas (device ordinals) it owns, its environment.
type PlannedWorker struct {
	Rank      int               `json:"rank"`
	LocalRank int               `json:"local_rank"`
	NodeRank  int               `json:"node_rank"`
	Replicas  []int             `json:"replicas"`
	Env       map[string]string `json:"env"`
}

// Plan is a dry run of s: it detects this host and plans the world as Run would (Devices, the world this host's
// environment describes), and starts nothing and joins no rendezvous: a world that a rendezvous would form is
// planned as this host alone. RunID "" shows a placeholder, MasterPort 0 one too. The errors are Run's before
// anything starts: ErrConfig for a setting, or a detection error.
func Plan(ctx context.Context, s Spec) (*DryRun, error) {
	is, _ := s.internal(ctx) // a dry run reads no rendezvous setting: a malformed Conf entry is Run's to refuse
	d, err := dryRun(ctx, is)
	return d, errorOf(err)
}

// dryRun is Plan of the internal Spec.
func dryRun(ctx context.Context, s spec.Spec) (*DryRun, error) {
	if s.MasterPort < 0 || s.MasterPort > 65535 {
		return nil, &failure.ConfigError{Field: failure.MasterPort, Value: strconv.Itoa(s.MasterPort),
			Hint: "must be 1..65535, or 0 for a placeholder"}
	}
	if s.Env != nil && s.Detect.LookupEnv == nil {
		s.Detect.LookupEnv = spec.EnvLookup(s.Env) // as Run: detection reads the workers' environment
	}
	h, err := topology.Detect(ctx, s.Detect, s.Logger)
	if err != nil {
		return nil, err
	}
	req := s.Request
	if s.PerCPU && h.Device.V.Kind().PerCore() {
		req.NProcs = runtime.NumCPU()
	}
	plan, node, l, err := h.JobPlan(req)
	if err != nil {
		return nil, err
	}
	rt := workerenv.Runtime{RunID: s.RunID, MasterAddr: s.MasterAddr, MasterPort: s.MasterPort,
		Role: cmp.Or(s.Role, workerenv.DefaultRole), MaxRestarts: s.MaxRestarts}
	if l != nil { // the job-wide world a run joins: node 0's address, the run id it would have
		rt.MasterAddr = cmp.Or(rt.MasterAddr, l.Coordinator)
		env := s.Env
		if env == nil {
			env = os.Environ()
		}
		rt.RunID = cmp.Or(rt.RunID, spec.JobSetRunID(env), spec.NoRunID)
	}
	rt.MasterAddr = cmp.Or(rt.MasterAddr, spec.DefaultMasterAddr)
	d := dryRunOf(workerenv.Plan(plan, rt))
	d.Node, d.DeviceSource = node, fmt.Sprint(h.Device.Source)
	if h.MetadataErr != nil {
		d.Notes = append(d.Notes, fmt.Sprintf("planned from what sysfs proves; %v", h.MetadataErr))
	}
	if note := h.GPUShareNote(len(plan.Workers)); note != "" {
		d.Notes = append(d.Notes, note)
	}
	if err := h.CheckFree(); errors.Is(err, topology.ErrChipBusy) {
		d.Refusal = err
	}
	return d, nil
}

func dryRunOf(p *topology.Plan) *DryRun {
	d := &DryRun{Device: string(p.Device)}
	for _, n := range p.Nodes {
		d.Nodes = append(d.Nodes, PlannedNode(n))
	}
	for _, w := range p.Workers {
		d.Workers = append(d.Workers, PlannedWorker(w))
	}
	return d
}
