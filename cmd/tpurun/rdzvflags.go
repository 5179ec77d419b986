package main

import (
	"cmp"
	"net"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"tpurun/cmd/tpurun/internal/cli"
	"tpurun/internal/failure"
	"tpurun/internal/spec"
)

// rdzvFlags are the multi-host flags (torchrun's names plus tpurun's).
type rdzvFlags struct {
	fs                                                                        *pflag.FlagSet
	nnodes, backend, endpoint, id, conf, token, nodeName, nodeAddr, localAddr string
	nodeRank, numSlices, sliceID                                              int
	timeout                                                                   cli.Seconds
}

func addRdzvFlags(fs *pflag.FlagSet) *rdzvFlags {
	r := &rdzvFlags{fs: fs}
	fs.StringVar(&r.nnodes, "nnodes", "1", "number of nodes (hosts) of the job: N, or MIN:MAX for an elastic world that restarts with the nodes it has")
	cli.Bind(fs, "nnodes", failure.NNodes, failure.RendezvousNodes, failure.RendezvousMinNodes)
	fs.IntVar(&r.nodeRank, "node-rank", -1, "this node's rank (default: assigned by the rendezvous, or from TPU_WORKER_ID / SLURM_NODEID)")
	cli.Bind(fs, "node-rank", failure.NodeRank, failure.RendezvousNodeRank)
	fs.StringVar(&r.backend, "rdzv-backend", "", "multi-host rendezvous: "+backendNames()+" (default static when --nnodes > 1 without --rdzv-endpoint, else tcp)")
	cli.Bind(fs, "rdzv-backend", failure.RendezvousBackend)
	fs.StringVar(&r.endpoint, "rdzv-endpoint", "", "tcp/static: host:port of the embedded server (node 0); etcd: host:2379[,host:2379...]")
	cli.Bind(fs, "rdzv-endpoint", failure.RendezvousEndpoint)
	fs.StringVar(&r.id, "rdzv-id", "", "run id shared by every node (default: --run-id)")
	cli.Bind(fs, "rdzv-id", failure.RendezvousRunID)
	fs.StringVar(&r.conf, "rdzv-conf", "", "key=value,...: join_timeout, heartbeat, is_host, port, hosts, prefix, linger, last_call_timeout")
	cli.Bind(fs, "rdzv-conf", failure.RendezvousOption)
	fs.Var(&r.timeout, "rdzv-timeout", "how long to wait for every node to join: seconds or a duration such as 5m (default "+cli.DefaultRendezvousTimeout.String()+")")
	fs.StringVar(&r.token, "rdzv-token", "", "shared secret of the rendezvous (or env TPURUN_RDZV_TOKEN); required off loopback")
	cli.Bind(fs, "rdzv-token", failure.RendezvousToken)
	fs.StringVar(&r.nodeName, "node-name", "", "this node's identity in the rendezvous (default: the hostname)")
	cli.Bind(fs, "node-name", failure.RendezvousHostName)
	fs.StringVar(&r.localAddr, "local-addr", "", "torchrun's name for --node-addr")
	fs.StringVar(&r.nodeAddr, "node-addr", "", "the address other nodes reach this node at (default: the local address toward the endpoint)")
	fs.IntVar(&r.numSlices, "num-slices", 0, "multi-slice: number of slices (default MEGASCALE_NUM_SLICES, else 1)")
	fs.IntVar(&r.sliceID, "slice-id", -1, "multi-slice: this node's slice (default MEGASCALE_SLICE_ID, else 0)")
	cli.Bind(fs, "slice-id", failure.SliceID)
	return r
}

// spec is the rendezvous of the job: a world of one (no backend; its node rank, slice, options and run id still
// checked and used) unless a backend, an endpoint or more than one node was asked for. runID is --run-id, the
// default of --rdzv-id; master is --master-addr and --master-port, the default endpoint of the static backend, as
// torchrun's. notes are warnings for the log.
func (r *rdzvFlags) spec(runID, masterAddr string, masterPort *int) (c spec.RendezvousSpec, notes []string, err error) {
	c = spec.RendezvousSpec{NumSlices: r.numSlices, SliceID: r.sliceID}
	c.RunID, c.NodeRank, c.Timeout = r.id, r.nodeRank, time.Duration(r.timeout)
	lo, n, err := cli.ParseNNodes(r.nnodes)
	if err == nil {
		c.Conf, err = cli.ParseRendezvousConf(r.conf)
	}
	if err != nil {
		return c, nil, err
	}
	if r.fs.Changed("rdzv-timeout") && r.timeout == 0 {
		return c, nil, &failure.ConfigError{Field: "--rdzv-timeout", Value: "0", Hint: "must be positive: how long to wait for every node (default " + cli.DefaultRendezvousTimeout.String() + ")"}
	}
	if r.backend == "" && r.endpoint == "" && n <= 1 {
		// --nnodes 1 (--standalone sets it) is one node on purpose; without it, a host whose environment says it is
		// one of several joins them (launcher: discover)
		c.Alone = r.fs.Changed("nnodes")
		return c, nil, nil
	}
	c.Backend, c.Endpoint, c.NNodes, c.MinNodes, c.Token, c.NodeName = r.backend, r.endpoint, n, lo, r.token, r.nodeName
	switch {
	case c.Backend != "":
	case c.Endpoint != "":
		c.Backend = "tcp" // c10d, on the endpoint given
	default:
		c.Backend = "static" // node 0 from the host list, or --master-addr
	}
	c.NodeAddr = cmp.Or(r.nodeAddr, r.localAddr)
	c.RunID = cmp.Or(c.RunID, runID) // else the JobSet's, or torchrun's "none" (spec.Spec)
	if !c.Elastic() && !r.fs.Changed("nnodes") {
		c.NNodes = 0 // a fixed world's size: from the host list
	}
	return c, r.master(&c, masterAddr, masterPort), nil
}

// master applies --master-addr and --master-port to the rendezvous c as torchrun does: the endpoint of a fixed
// world (static), which the launch lays out; under an elastic backend --master-addr is ignored with torchrun's
// warning (the notes returned).
func (r *rdzvFlags) master(c *spec.RendezvousSpec, masterAddr string, masterPort *int) (notes []string) {
	given := r.fs.Changed("master-addr") || r.fs.Changed("master-port")
	switch {
	case c.Elastic() && r.fs.Changed("master-addr"):
		notes = append(notes, "--master-addr is only used by the static rendezvous (as under torchrun): under "+c.Backend+
			" every worker's MASTER_ADDR is node 0's address (give node 0 --node-addr to choose it); --master-port is node 0's MASTER_PORT")
	case !c.Elastic() && c.Endpoint == "" && given:
		// torchrun's classic multi-node line: every node names node 0 by --master-addr/--master-port. The workers'
		// store takes MASTER_PORT (29500 unless given), so tpurun's rendezvous server listens on the port above it.
		*masterPort = cmp.Or(*masterPort, 29500)
		c.Endpoint = net.JoinHostPort(masterAddr, strconv.Itoa(*masterPort+1))
		c.AllowUnauthenticated = true // as torchrun's line: its store on MASTER_PORT has no token either (one warning)
	}
	return notes
}
