package topology

import (
	"cmp"
	"maps"
	"net"
	"strconv"
	"strings"
)

// Slice is the agreed description of a TPU slice from which every worker's env follows (docs/TOPOLOGY.md).
type Slice struct {
	Accelerator        string   // TPU_ACCELERATOR_TYPE; "" when unknown
	Hosts              []string // the hosts of this run in node order (this host alone for a one-chip run)
	NodeRank           int      // this host's index in Hosts
	ProcsPerHost       int
	ChipsPerHostBounds Bounds
	HostBounds         Bounds
	ProcessBounds      Bounds // the process grid of the whole slice (3 numbers, or 4 on tpu7x: see Host.Slice)
	ChipsPerProcess    Bounds
	VisibleChips       []int // local chip indices: one per process, or all of them for SPMD
	ReplicasPerProcess int
	SPMD               bool
	// SingleProcess is xmp.spawn(nprocs=1)'s one-chip run (torch_xla's configure_one_chip_topology): one process
	// on one chip, no CLOUD_TPU_TASK_ID, no TPU_PROCESS_ADDRESSES or TPU_PROCESS_PORT.
	SingleProcess bool
	// SliceHosts and WorkerID describe the whole slice (TPU_WORKER_HOSTNAMES and TPU_WORKER_ID), which a one-chip
	// run keeps.
	SliceHosts []string
	WorkerID   int
	// SkipMDS is the workers' TPU_SKIP_MDS_QUERY; "" leaves it unset (Host.WorkerSkipMDS).
	SkipMDS   string
	PortBase  int // every host's TPU_PROCESS_PORT is PortBase (0: DefaultTPUPortBase) + local rank
	Megascale map[string]string
}

// Plan builds the world plan of the slice: every host's workers, with the env of TPU_FACTS.md and docs/TOPOLOGY.md.
func (s Slice) Plan() *Plan {
	p := &Plan{Device: TPU}
	k := s.ProcsPerHost
	var addrs []string
	for n, host := range s.Hosts {
		p.Nodes = append(p.Nodes, Node{Rank: n, Host: host, LocalWorkers: k})
		if len(s.Hosts) == 1 {
			host = "localhost" // torch_xla's get_worker_ips: any single host is localhost
		}
		for lr := 0; lr < k; lr++ {
			addrs = append(addrs, net.JoinHostPort(host, strconv.Itoa(s.port(lr))))
		}
	}
	for n := range s.Hosts {
		wid := n
		if s.SingleProcess {
			wid = s.WorkerID
		}
		for lr := 0; lr < k; lr++ {
			rank := n*k + lr
			env := map[string]string{
				"PJRT_DEVICE":                  "TPU",
				"PJRT_LOCAL_PROCESS_RANK":      strconv.Itoa(lr),
				"PJRT_LOCAL_PROCESS_COUNT":     strconv.Itoa(k),
				"TPU_CHIPS_PER_PROCESS_BOUNDS": s.ChipsPerProcess.String(),
				"TPU_PROCESS_BOUNDS":           s.ProcessBounds.String(),
				"TPU_HOST_BOUNDS":              s.HostBounds.String(),
				"TPU_CHIPS_PER_HOST_BOUNDS":    s.ChipsPerHostBounds.String(),
				"TPU_WORKER_ID":                strconv.Itoa(wid),
			}
			if len(s.SliceHosts) > 1 {
				env["TPU_WORKER_HOSTNAMES"] = strings.Join(s.SliceHosts, ",")
			}
			if s.SkipMDS != "" {
				env["TPU_SKIP_MDS_QUERY"] = s.SkipMDS
			}
			if s.Accelerator != "" {
				env["TPU_ACCELERATOR_TYPE"] = s.Accelerator
			}
			var replicas []int
			switch {
			case s.SPMD:
				env["XLA_USE_SPMD"] = "1"
				env["TPU_VISIBLE_CHIPS"] = joinInts(s.VisibleChips, ",")
				replicas = []int{n}
			case s.SingleProcess:
				env["TPU_VISIBLE_CHIPS"] = strconv.Itoa(s.VisibleChips[0])
				replicas = []int{0}
			default:
				env["TPU_VISIBLE_CHIPS"] = strconv.Itoa(s.VisibleChips[lr])
				env["CLOUD_TPU_TASK_ID"] = strconv.Itoa(rank)
				env["TPU_PROCESS_PORT"] = strconv.Itoa(s.port(lr))
				env["TPU_PROCESS_ADDRESSES"] = strings.Join(addrs, ",")
				for r := 0; r < s.ReplicasPerProcess; r++ {
					replicas = append(replicas, rank*s.ReplicasPerProcess+r)
				}
			}
			if k > 1 {
				env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
			}
			maps.Copy(env, s.Megascale)
			p.Workers = append(p.Workers, Worker{Rank: rank, LocalRank: lr, NodeRank: n, Replicas: replicas, Env: env})
		}
	}
	return p
}

func (s Slice) port(lr int) int { return cmp.Or(s.PortBase, DefaultTPUPortBase) + lr }
