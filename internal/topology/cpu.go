package topology

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
)

// CPU is the kind of a host without accelerators: the default when nothing else is found.
const CPU Device = "cpu"

func init() { register(cpu{}) }

// cpu is the CPU kind: one worker per process asked for (one by default), each a PJRT CPU client.
type cpu struct{ perHost }

func (cpu) Device() Device         { return CPU }
func (cpu) PerCore() bool          { return true }
func (cpu) NCCL() bool             { return false }
func (cpu) preference() int        { return 0 }
func (cpu) pjrt() []string         { return []string{"CPU"} }
func (cpu) aliases() []string      { return nil }
func (cpu) devices(*Host) []Chip   { return nil }
func (cpu) perRank() []string      { return nil }
func (cpu) devNodeGlobs() []string { return nil }

// claim: every host has CPUs, so auto detection ends here.
func (cpu) claim(*detector, pciScan) (Value[Device], bool) { return val(CPU, Default()), true }

func (cpu) detect(_ context.Context, d *detector) error {
	d.h.ReplicasPerChip = 1
	return nil
}

func (cpu) plan(h *Host, req Request) (*Plan, error) {
	p, err := CPUPlan(cmp.Or(req.NProcs, 1))
	if err != nil {
		return nil, err
	}
	for _, w := range p.Workers {
		w.Env["CPU_NUM_DEVICES"] = "1"
	}
	return p, nil
}
func (cpu) settings(h *Host) []Setting { return []Setting{spmdSetting(h)} }

// CPUPlan is the single-host plan of n CPU workers: the embedded default that needs no accelerator.
func CPUPlan(n int) (*Plan, error) {
	if n < 1 {
		return nil, fmt.Errorf("nprocs %d: need at least 1 worker", n)
	}
	return localPlan(CPU, "CPU", n), nil
}

// localPlan is the plan of n workers of dev on this host alone, each a PJRT client of device pjrt.
func localPlan(dev Device, pjrt string, n int) *Plan {
	p := &Plan{Device: dev, Nodes: []Node{{Rank: 0, Host: "localhost", LocalWorkers: n}}}
	for i := range n {
		p.Workers = append(p.Workers, Worker{Rank: i, LocalRank: i, Replicas: []int{i}, Env: map[string]string{
			"PJRT_DEVICE":              pjrt,
			"PJRT_LOCAL_PROCESS_RANK":  strconv.Itoa(i),
			"PJRT_LOCAL_PROCESS_COUNT": strconv.Itoa(n),
		}})
	}
	return p
}
