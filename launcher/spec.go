package launcher

import (
	"io"
	"os"
	"time"

	"go.uber.org/zap"
)

// The defaults of a Spec's zero fields.
const (
	DefaultGrace        = 10 * time.Second // Spec.Grace
	DefaultMasterAddr   = "127.0.0.1"      // Spec.MasterAddr of a world of one
	DefaultDrainTimeout = 2 * time.Second  // Spec.DrainTimeout
	DefaultRole         = "default"        // Spec.Role (torchrun's ROLE_NAME)
)

// Spec is everything one job needs, on one host or many. Run reads it once and never writes it. The zero value of
// every field takes the default its comment gives; the zero Spec (with a Program) runs one worker per device of
// this host (one on a host without accelerators) as a world of one node, and changes nothing process-wide.
type Spec struct {
	// Program is the program every worker runs and its arguments: a path, or a name looked up on PATH.
	// "${local_rank}" in an argument is replaced by the worker's local rank. Unused in function mode.
	Program []string
	// Function, when set, is function mode (xmp.spawn's contract): every worker calls a Python function and its
	// return value is collected into Report.Results.
	Function *FnSpec
	// Preload names Python modules imported once, by one interpreter per host that then forks every worker
	// instead of exec'ing Program, which must be a Python program (FILE.py, -m MODULE, function mode). Needs
	// Process.Reap. "__main__" is function mode's caller's main module. Empty: every worker is exec'd.
	Preload []string
	// Env is the environment the workers inherit, as "KEY=value" entries; nil means os.Environ(). The launcher adds
	// torchrun's and the device's variables (RANK, WORLD_SIZE, MASTER_ADDR, ..., see Plan) on top.
	Env []string
	// Dir is the workers' working directory; "" is this process's.
	Dir string

	Devices    Devices        // which devices of this host, split how
	Rendezvous RendezvousSpec // how this node meets the others; the zero value is a world of one
	Output     Output         // where the workers' output goes
	Results    ResultsSpec    // the result contract and the results document
	Process    Process        // what Run may change process-wide; the zero value changes nothing

	// Grace is how long a worker has between SIGTERM and SIGKILL when the job stops; 0 means DefaultGrace.
	Grace time.Duration
	// Timeout stops the whole job after this long (the error matches ErrTimeout, exit 124); 0 means none.
	Timeout time.Duration
	// MaxRestarts is how many times the whole world restarts after a worker failure; 0 means none.
	MaxRestarts int
	// DrainTimeout is how long, once every worker is gone, a pipe of their output may stay idle before it is given
	// up (a grandchild holding it open); 0 means DefaultDrainTimeout.
	DrainTimeout time.Duration

	// RunID names the run (TORCHELASTIC_RUN_ID, log directories); "" means the rendezvous's, else the JobSet's
	// (JOBSET_UID or JOBSET_NAME with JOBSET_RESTART_ATTEMPT in Env), else "none" for several nodes, else random.
	RunID string
	// MasterAddr and MasterPort are MASTER_ADDR and MASTER_PORT; "" means DefaultMasterAddr on one node (node 0's
	// address on several), 0 means a free port picked at launch.
	MasterAddr string
	MasterPort int
	// Role is ROLE_NAME; "" means DefaultRole.
	Role string

	// SampleInterval is how often the live workers' RSS and CPU are sampled (the Sampled event, RankSummary's
	// PeakRSS); 0 means 1s, negative disables sampling.
	SampleInterval time.Duration
	// Logger receives the launcher's own logs; nil means none.
	Logger *zap.Logger
	// Observers learn of attempts, failures, samples, results and rendezvous times while the job runs.
	Observers []Observer
}

// Devices says which devices of this host the job uses and how they are split among the workers. Detection reads
// this host once per Run (and Plan): sysfs and /dev, the environment (Spec.Env, the workers' environment), and
// on a cloud TPU VM the metadata server.
type Devices struct {
	// Device is "", "auto", "cpu", "gpu" or "tpu"; "" and "auto" pick TPU, else GPU, else CPU.
	Device string
	// NProcs is the number of workers on this host; 0 means one per chip or GPU, one on CPU (see PerCPU).
	NProcs int
	// PerCPU runs one worker per CPU core when detection finds no accelerator (torchrun's --nproc-per-node cpu).
	PerCPU bool
	// SPMD runs one worker per host that sees every local chip (XLA_USE_SPMD=1); false leaves it to the
	// environment's XLA_USE_SPMD.
	SPMD bool
	// AcceleratorType overrides the TPU type detection reads (TPU_ACCELERATOR_TYPE, the metadata server), e.g.
	// "v5litepod-8"; "" means as detected.
	AcceleratorType string
	// TPUPortBase is the first of the TPU runtime's ports, one per worker; 0 means 8476.
	TPUPortBase int
	// IsolateGPUs gives GPU worker i CUDA_VISIBLE_DEVICES=<its GPU> alone; off (torchrun's way) every worker sees
	// every usable GPU and uses cuda:LOCAL_RANK.
	IsolateGPUs bool
	// MetadataTimeout bounds all queries of the metadata server of one detection together; 0 means 3s.
	MetadataTimeout time.Duration
	// Force starts the workers even when another process holds one of the chips.
	Force bool
}

// RendezvousSpec says how this launcher meets the other nodes of a multi-host job. The zero value (no backend) is
// a world of one: this host alone, as detected, unless this host's environment says it is one of several (a TPU
// slice's host, a multislice job's): then it joins them, as Alone says.
type RendezvousSpec struct {
	// Backend is "static" (every node given its rank), "tcp" (alias "c10d": node 0 serves, ranks are assigned) or
	// "etcd"; "" is a world of one. tcp and etcd need their package imported for its side effect
	// (import _ "tpurun/rendezvous/tcp").
	Backend string
	// Endpoint is node 0's host:port (tcp, static), or etcd's host:2379[,host:2379...].
	Endpoint string
	// RunID is shared by every node; "" means Spec.RunID.
	RunID string
	// NNodes is the number of nodes (the most, for an elastic world); 0 means from the host list (static).
	NNodes int
	// MinNodes is the fewest nodes a generation of an elastic world may have; 0 means NNodes.
	MinNodes int
	// NodeRank is this node's rank, or AnyNode: assigned by the backend (tcp, etcd). In a world of one, or one
	// laid out by this host's environment (TPU_WORKER_ID, SLURM_NODEID), the environment's rank is taken for 0.
	NodeRank int
	// Conf holds the backend's options as "key=value" entries: join_timeout, heartbeat, is_host, port, hosts,
	// prefix, linger (torchrun's --rdzv-conf, one entry per option).
	Conf []string
	// Timeout bounds the join; 0 means the backend's default.
	Timeout time.Duration
	// Token is the shared secret every message carries; required off loopback.
	Token string
	// NodeName is this node's identity; "" means the hostname (with "#<rank>" when NodeRank is given).
	NodeName string
	// NodeAddr is the address the other nodes reach this node at; "" means the local address toward Endpoint.
	NodeAddr string
	// NumSlices and SliceID place this node in a multislice job. NumSlices 0 means both from the environment
	// (MEGASCALE_NUM_SLICES and MEGASCALE_SLICE_ID as detection read them), else 1 slice, this node's 0; SliceID is
	// read only when NumSlices is set.
	NumSlices int
	SliceID   int
	// Alone makes a world of one on purpose (torchrun's --standalone), also on a host whose environment says it
	// is one of several.
	Alone bool
	// AllowUnauthenticated lets a world laid out by the environment (a slice's hosts) meet off loopback without
	// Token, as torchrun's store does; Run warns once. A backend on an Endpoint the caller names still needs Token
	// off loopback.
	AllowUnauthenticated bool
}

// AnyNode is RendezvousSpec.NodeRank for a rank the backend assigns.
const AnyNode = -1

// Output says where the workers' output goes: by default every line of every worker to Stdout or Stderr with a
// "[rank]" prefix, and no worker reads stdin.
type Output struct {
	// Stdout and Stderr receive the workers' lines; nil means os.Stdout, os.Stderr.
	Stdout, Stderr io.Writer
	// LogDir receives per-rank files DIR/<run-id>_<random>/attempt_<n>/<local rank>/{stdout,stderr}.log of the
	// streams Redirects or Tee select; "" means a private temporary directory when they select any.
	LogDir string
	// Redirects selects streams that go only to the log files; Tee streams that go to both.
	Redirects Streams
	Tee       Streams
	// LocalRanks shows only these local ranks' lines; nil shows all.
	LocalRanks []int
	// Prefix is the per-line prefix template: {rank}, {local_rank}, {node_rank}, {role} (or torchrun's $rank,
	// ...); "" means "[{rank}] ".
	Prefix string
	// Raw passes the workers' lines as they are, without Prefix (torchrun's default).
	Raw bool
	// Stdin is what the workers read; nil gives every worker /dev/null. StdinTo says which workers get it.
	Stdin   *os.File
	StdinTo StdinMode
}

// Streams selects standard streams for every local rank (All), or per local rank (PerRank, when non-nil: the
// ranks not in it get StdNone).
type Streams struct {
	All     Std
	PerRank map[int]Std
}

// Std selects standard streams, with torchrun's numbers.
type Std int

// The values of Std.
const (
	StdNone Std = 0 // neither stream
	StdOut  Std = 1 // stdout
	StdErr  Std = 2 // stderr
	StdAll  Std = 3 // both
)

// StdinMode says which workers read Output.Stdin; the others read /dev/null.
type StdinMode string

// The values of StdinMode.
const (
	StdinAll   StdinMode = "all"  // every worker (the default when Stdin is set), as torchrun's inherit it
	StdinFirst StdinMode = "0"    // local rank 0 only
	StdinNone  StdinMode = "none" // no worker
)

// ResultsSpec is the result contract of a job: whether every replica must report a result (through package
// worker, or tpurun.report in Python), the largest frame, and where the results document goes.
type ResultsSpec struct {
	// Required: every replica must report a result, else the job fails (exit 65); implied by function mode.
	Required bool
	// MaxFrameBytes is the largest accepted result payload in bytes; 0 means worker.DefaultMaxPayload.
	MaxFrameBytes int64
	// File receives the results document (JSON) atomically, on every node, also when the job fails.
	File string
	// Document: Report.Results is wanted on every node of a multi-host job, not only on node 0; implied by File.
	Document bool
}

// FnSpec is function mode: fn(index, *args) in every worker, its return value collected (xmp.spawn's contract).
type FnSpec struct {
	// Target is "package.module:function" or "path/to/file.py:function".
	Target string
	// ArgsJSON is a JSON list of the first arguments after index, e.g. `[3, {"lr": 0.1}]`; "" means [].
	ArgsJSON string
	// Args are further arguments, passed as strings.
	Args []string
	// Python is the interpreter; "" means $PYTHON_EXEC, else python3 from PATH.
	Python string
}

// Process says what Run may change in the calling process. The zero value changes nothing: Run waits only for the
// processes it started (each alone, as exec.Cmd.Wait does), leaves signals to the program, and leaves the garbage
// collector alone; an orphan a worker leaves goes to PID 1, and the sweep at the end of each attempt finds it by
// the sweep tag in its environment. tpurun's command line turns every option on.
type Process struct {
	// CatchSignals catches, while Run runs, the signals a job acts on (SIGTERM, SIGINT, SIGQUIT stop it) or
	// forwards to its workers (SIGHUP, SIGUSR1, ...), so that a SIGTERM to the program stops the job (exit 143)
	// instead of ending the program and leaving the workers running. Ignored when Signals is set.
	CatchSignals bool
	// Signals, when set, are the signals the job acts on (as CatchSignals would catch them): the caller routes them.
	Signals <-chan os.Signal
	// Reap makes this process the child subreaper while Run runs, and reaps every child of the process: an orphan
	// a worker leaves is reaped and swept even outside the worker's group. Meanwhile nothing else in the program
	// may wait for a child (exec.Cmd.Wait would race the reaper). Needed by Spec.Preload.
	Reap bool
	// SweepSubtree says this process runs nothing but the job: with Reap, the orphan sweep walks the whole subtree
	// of the process and also kills an orphan that dropped the job's environment, and any other process of the
	// program.
	SweepSubtree bool
	// SweepTag is given to every worker as TPURUN_SWEEP_TAG, which the sweep matches: launchers sharing a run id
	// on one machine must not sweep each other's workers. "" means random.
	SweepTag string
}
