package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"tpurun/launcher"
	"tpurun/launcher/results"
	"tpurun/launcher/topology"
	"tpurun/rendezvous"
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

// nnodes parses --nnodes: N, or torchrun's MIN:MAX with MIN == MAX (elastic ranges are not supported).
func (r *rdzvFlags) nnodes() (int, error) {
	return parseNNodes(r.get("nnodes"))
}

// parseNNodes parses a --nnodes value: N, or N:N.
func parseNNodes(v string) (int, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 1, nil
	}
	lo, hi, ranged := strings.Cut(v, ":")
	n, err := strconv.Atoi(lo)
	if err == nil && ranged {
		var m int
		if m, err = strconv.Atoi(hi); err == nil && m != n {
			return 0, &launcher.ConfigError{Field: "--nnodes", Value: v, Hint: "elastic ranges are not supported; give MIN == MAX or one number"}
		}
	}
	if err != nil || n < 1 || n > rendezvous.MaxNodes {
		return 0, &launcher.ConfigError{Field: "--nnodes", Value: v, Hint: fmt.Sprintf("need a whole number 1..%d", rendezvous.MaxNodes)}
	}
	return n, nil
}

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

// config builds the rendezvous configuration from the flags and the environment.
func (r *rdzvFlags) config(runID string, log *zap.Logger) (rendezvous.Config, error) {
	c := rendezvous.Config{Endpoint: r.get("rdzv-endpoint"), RunID: r.get("rdzv-id"), NodeRank: -1, Logger: log}
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
		c.RunID = runID
	}
	if c.RunID == "" {
		return c, &launcher.ConfigError{Field: "--rdzv-id", Value: "", Hint: "a multi-host run needs the same run id on every node: pass --rdzv-id or --run-id"}
	}
	c.Backend = r.get("rdzv-backend")
	if !r.changed("rdzv-backend") || c.Backend == "" {
		c.Backend = rendezvous.BackendStatic
		if c.Endpoint != "" {
			c.Backend = rendezvous.BackendTCP
		}
	}
	if c.Conf, err = rendezvous.ParseConf(r.get("rdzv-conf")); err != nil {
		return c, fmt.Errorf("--rdzv-conf: %w", err)
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
	return c, nil
}

// outcome is what each node publishes when its workers are gone: the world-wide verdict is computed from them.
type outcome struct {
	Node    int            `json:"node"`
	Code    int            `json:"code"`
	Origin  bool           `json:"origin"` // this node's own worker failed (it was not stopped by another node)
	Rank    int            `json:"rank"`   // global rank of the failed worker, -1 when none
	Error   string         `json:"error,omitempty"`
	Results *results.Share `json:"results,omitempty"` // this node's workers, results and violations (node 0 merges them)
	Exits   []rankEnd      `json:"exits,omitempty"`   // how this node's workers ended (node 0 builds the document)
}

// rankEnd is how one worker of another node ended, for node 0's results document.
type rankEnd struct {
	Rank     int `json:"rank"`
	PID      int `json:"pid"`
	ExitCode int `json:"exit_code"`
	Signal   int `json:"signal,omitempty"`
}

// remoteStop is the cause of a run stopped because another node failed or vanished.
type remoteStop struct{ f rendezvous.Failure }

func (e *remoteStop) Error() string { return "stopped because another node failed: " + e.f.String() }

// verdict picks the world's exit code from every node's outcome: the code of the lowest node whose own worker
// failed, else the first non-zero code by node rank, else 0.
func verdict(all []outcome) (outcome, bool) {
	for _, o := range all {
		if o.Origin && o.Code != 0 {
			return o, true
		}
	}
	for _, o := range all {
		if o.Code != 0 {
			return o, true
		}
	}
	return outcome{}, false
}

// localAddr is the address of this host that reaches endpoint: loopback for a loopback (or empty) endpoint.
func localAddr(endpoint string) string {
	first := strings.Split(endpoint, ",")[0]
	h, _, err := net.SplitHostPort(first)
	if err != nil || h == "" {
		return "127.0.0.1"
	}
	if ip := net.ParseIP(h); (ip != nil && ip.IsLoopback()) || h == "localhost" {
		return "127.0.0.1"
	}
	c, err := net.Dial("udp", first) // no packet is sent: this only asks the kernel for the route
	if err != nil {
		return "127.0.0.1"
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}

// runMultihost is the run path of one node of a multi-host job: detect once, join, build the world plan, barrier,
// run the local workers with the world env, spread failures both ways, agree on one verdict.
func runMultihost(o *options, log *zap.Logger, stdout, stderr io.Writer) int {
	ctx := context.Background()
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "tpurun: %v (exit %d)\n", err, code)
		return code
	}
	rc, err := o.rdzv.config(o.cfg.RunID, log)
	if err != nil {
		return fail(launcher.ExitUsage, err)
	}
	numSlices, err := o.rdzv.intFlag("num-slices", "MEGASCALE_NUM_SLICES", 1)
	if err != nil {
		return fail(launcher.ExitUsage, err)
	}
	sliceID, err := o.rdzv.intFlag("slice-id", "MEGASCALE_SLICE_ID", 0)
	if err != nil {
		return fail(launcher.ExitUsage, err)
	}

	// Detect exactly once; the local split is planned against a placeholder world of the right size.
	opts, err := o.dev.options(log)
	if err != nil {
		return fail(topologyExit(err), err)
	}
	h, err := topology.Detect(ctx, opts)
	if err != nil {
		return fail(topologyExit(err), err)
	}
	req := o.dev.request(h)
	accel := string(h.Device.V)
	if h.Device.V == topology.TPU && h.Accelerator.IsSet() {
		accel = h.Accelerator.V.Type
	}
	k, err := topology.LocalWorkers(h, req, rc.NNodes, numSlices)
	if err != nil {
		return fail(topologyExit(err), err)
	}
	defer o.res.cleanup()
	if err := o.res.setup(&o.cfg, o.fnArgs); err != nil {
		return fail(launcher.ExitCode(err), err)
	}

	r, err := rendezvous.New(ctx, rc)
	if err != nil {
		return fail(rdzvExit(err), err)
	}
	defer func() { _ = r.Close() }()
	m := rendezvous.Member{Instance: rendezvous.NewInstance(), Host: o.rdzv.get("node-name"), Addr: o.rdzv.get("node-addr"),
		LocalWorkers: k, Accelerator: accel, RunID: rc.RunID, SliceID: sliceID, NumSlices: numSlices, Rank: rc.NodeRank}
	if rc.Backend != rendezvous.BackendStatic {
		if m.Host == "" {
			if m.Host, err = os.Hostname(); err != nil {
				return fail(launcher.ExitInternal, fmt.Errorf("hostname: %w; pass --node-name", err))
			}
		}
		if m.Addr == "" {
			m.Addr = localAddr(r.Endpoint())
		}
	}
	if o.cfg.MasterPort != 0 { // --master-port: node 0's choice, shared with every node
		ports, err := rendezvous.PickPorts()
		if err != nil {
			return fail(launcher.ExitInternal, err)
		}
		ports[rendezvous.PortMaster] = o.cfg.MasterPort
		m.Ports = ports
	}
	for g := 0; ; g++ {
		m.Generation = g
		code, again := generation(ctx, o, r, rc, h, req, m, log, stdout, stderr, g < o.cfg.MaxRestarts)
		if !again {
			return code
		}
	}
}

// generation runs one generation of the world: join, plan, barrier, run, verdict. again is true when the world
// failed and may restart (canRestart, no terminating signal): every node then joins generation m.Generation+1.
func generation(ctx context.Context, o *options, r *rendezvous.Rendezvous, rc rendezvous.Config, h *topology.Host,
	req topology.Request, m rendezvous.Member, log *zap.Logger, stdout, stderr io.Writer, canRestart bool) (code int, again bool) {
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "tpurun: %v (exit %d)\n", err, code)
		return code
	}
	var err error
	jctx, stopJoin := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	joinStart := time.Now()
	s, err := r.Join(jctx, m)
	stopJoin()
	if err != nil {
		return fail(rdzvExit(err), fmt.Errorf("run %s, %s backend: %w", rc.RunID, rc.Backend, err)), false
	}
	if o.live != nil {
		o.live.SetRendezvous(time.Since(joinStart))
	}
	defer func() { _ = s.Close() }()
	a := s.Assignment()
	log.Info("rendezvous agreed", zap.Int("node_rank", a.NodeRank), zap.Int("nnodes", len(a.Nodes)),
		zap.Int("world_size", a.WorldSize), zap.String("master", net.JoinHostPort(a.MasterAddr, strconv.Itoa(a.MasterPort()))))

	tw := topology.World{NodeRank: a.NodeRank, NumSlices: a.NumSlices, MegascaleCoordinator: a.MegascaleCoordinator,
		MegascalePort: a.Ports[rendezvous.PortMegascale]}
	for _, n := range a.Nodes {
		tw.Nodes = append(tw.Nodes, topology.WorldNode{Host: n.Host, Addr: n.Addr, LocalWorkers: n.LocalWorkers, SliceID: n.SliceID})
	}
	world, err := topology.WorldPlan(h, req, tw)
	if err == nil {
		err = world.CheckPorts(a.NodeRank, h.ProcRoot, nil)
	}
	if err != nil {
		_ = s.Fail(ctx, rendezvous.Failure{WorkerRank: -1, Reason: "planning failed: " + err.Error()})
		return fail(topologyExit(err), err), false
	}
	if err := s.Barrier(ctx, "start"); err != nil {
		return fail(rdzvExit(err), fmt.Errorf("barrier before start: %w", err)), false
	}

	o.cfg.Plan, o.cfg.NodeRank, o.cfg.RunID = world, a.NodeRank, a.RunID // the result collectors read them
	cfg := o.cfg
	cfg.MaxRestarts = 0 // restarts are new generations of the whole world (runMultihost)
	cfg.PriorRestarts, cfg.WorldMaxRestarts = m.Generation, o.cfg.MaxRestarts
	cfg.Plan, cfg.NodeRank, cfg.RunID = world, a.NodeRank, a.RunID
	cfg.MasterAddr, cfg.MasterPort = a.MasterAddr, a.MasterPort()
	cfg.SweepTag = a.RunID + "-node" + strconv.Itoa(a.NodeRank) + "-" + m.Instance
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var bg sync.WaitGroup
	prevFailure := cfg.OnFailure // the status endpoint's hook (Status.Watch), if any
	cfg.OnFailure = func(we *launcher.WorkerError) {
		if prevFailure != nil {
			prevFailure(we)
		}
		bg.Go(func() {
			if err := s.Fail(ctx, rendezvous.Failure{WorkerRank: we.Rank, Reason: we.Error()}); err != nil {
				log.Warn("could not tell the other nodes", zap.Error(err))
			}
		})
	}
	bg.Go(func() {
		first := true
		for f := range s.Failures() {
			if first {
				log.Error("stopping: another node failed", zap.Stringer("failure", f))
				cancel(&remoteStop{f: f})
				first = false
			}
		}
	})
	// Signals go to the workers through a relay that remembers them: a job stopped by a signal is not restarted.
	sigs, relay := make(chan os.Signal, 8), make(chan os.Signal, 8)
	var signaled atomic.Bool
	signal.Notify(sigs, o.tr.handled...) // --signals-to-handle
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		for sig := range sigs {
			if sig == syscall.SIGINT || sig == syscall.SIGTERM || sig == syscall.SIGHUP || sig == syscall.SIGQUIT {
				signaled.Store(true)
			}
			relay <- sig
		}
	}()
	cfg.Signals = relay
	rep, runErr := launcher.Run(rctx, cfg)
	signal.Stop(sigs)
	close(sigs)
	<-relayDone
	if rep != nil {
		rep.WriteSummary(stderr)
	}

	mine := outcome{Node: a.NodeRank, Code: launcher.ExitCode(runErr), Origin: runErr != nil, Rank: -1}
	var rs *remoteStop
	if errors.As(context.Cause(rctx), &rs) && errors.Is(runErr, context.Canceled) {
		mine.Origin, mine.Error = false, rs.Error()
	} else if runErr != nil {
		mine.Error = runErr.Error()
	}
	var we *launcher.WorkerError
	if errors.As(runErr, &we) {
		mine.Rank = we.Rank
	}
	var last *launcher.Attempt
	if rep != nil {
		last = rep.Last()
	}
	if last != nil && a.NodeRank != 0 {
		if c := o.res.collector(last.Number); c != nil {
			mine.Results = c.Share()
		}
		for _, rs := range last.Ranks {
			mine.Exits = append(mine.Exits, rankEnd{Rank: rs.Rank, PID: rs.PID, ExitCode: rs.ExitCode, Signal: int(rs.Signal)})
		}
	}
	gctx, gcancel := context.WithTimeout(ctx, 7*24*time.Hour)
	defer gcancel()
	all, gerr := publishGather(gctx, s, "outcome", mine)
	if gerr != nil {
		if mine.Origin {
			return fail(mine.Code, errors.New(mine.Error)), false
		}
		return fail(launcher.ExitRendezvous, fmt.Errorf("no world-wide verdict: %w", gerr)), false
	}
	v, failed := verdict(all)
	// Node 0 merges every node's results and exits into its report, checks exactly-once world-wide, writes
	// --results / --json, and shares the final code, which every node then exits with.
	final := outcome{Node: a.NodeRank, Code: v.Code, Error: v.Error, Rank: v.Rank}
	if a.NodeRank == 0 && last != nil {
		if c := o.res.collector(last.Number); c != nil {
			for _, oc := range all[1:] {
				if err := c.Add(oc.Node, oc.Results); err != nil {
					log.Error("results of another node break the contract", zap.Int("node", oc.Node), zap.Error(err))
				}
				for _, e := range oc.Exits {
					last.Ranks = append(last.Ranks, launcher.RankSummary{Rank: e.Rank, PID: e.PID, ExitCode: e.ExitCode, Signal: syscall.Signal(e.Signal)})
				}
			}
		}
		var worldErr error
		switch {
		case failed && v.Node == 0:
			worldErr = runErr
		case failed:
			worldErr = errors.New(v.Error)
		}
		final.Code = o.res.finish(rep, worldErr, v.Code, stdout, stderr)
		if final.Code != 0 && !failed {
			final.Error = "the results document of the world failed (see node 0)"
		}
	}
	finals, gerr := publishGather(gctx, s, "final", final)
	if gerr != nil {
		if mine.Origin {
			return fail(mine.Code, errors.New(mine.Error)), false
		}
		return fail(launcher.ExitRendezvous, fmt.Errorf("no world-wide verdict: %w", gerr)), false
	}
	final = finals[0]
	_ = s.Leave(ctx)
	cancel(nil)
	_ = s.Close()
	bg.Wait()
	if final.Code != 0 && canRestart && !signaled.Load() {
		log.Warn("the world failed: every node joins again as the next generation", zap.Int("generation", m.Generation),
			zap.Int("failed_node", v.Node), zap.Int("code", final.Code), zap.String("error", final.Error))
		return final.Code, true
	}
	switch {
	case final.Code == 0:
		return launcher.ExitOK, false
	case failed && v.Node == a.NodeRank:
		return fail(final.Code, errors.New(final.Error)), false
	case failed:
		return fail(final.Code, fmt.Errorf("node %d failed: %s", v.Node, final.Error)), false
	}
	return fail(final.Code, errors.New(final.Error)), false
}

// publishGather publishes this node's outcome and returns every node's, in node-rank order.
func publishGather(ctx context.Context, s *rendezvous.Session, key string, mine outcome) ([]outcome, error) {
	b, err := json.Marshal(mine)
	if err != nil {
		return nil, err
	}
	if err := s.Publish(ctx, key, b); err != nil {
		return nil, err
	}
	got, err := s.Gather(ctx, key)
	if err != nil {
		return nil, err
	}
	all := make([]outcome, 0, len(got))
	for n := 0; n < len(got); n++ {
		var oc outcome
		if err := json.Unmarshal(got[n], &oc); err != nil {
			return nil, fmt.Errorf("%s of node %d: %w", key, n, err)
		}
		oc.Node = n
		all = append(all, oc)
	}
	return all, nil
}

// rdzvExit maps a rendezvous error to tpurun's exit code: 2 for a bad configuration, 69 for everything else.
func rdzvExit(err error) int {
	var ce *launcher.ConfigError
	if errors.Is(err, rendezvous.ErrConfig) || errors.As(err, &ce) {
		return launcher.ExitUsage
	}
	return launcher.ExitRendezvous
}
