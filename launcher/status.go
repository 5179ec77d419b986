package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Status is the live state of a run as the status endpoint serves it: /healthz (200 while healthy, 503 from a
// worker failure until a restarted attempt begins, and for good when none does) and /metrics (Prometheus text
// format). Feed it through Watch (the config's sample, failure and attempt hooks), ResultReceived and
// SetRendezvous; serve it with Serve. The zero value is not usable: use NewStatus.
type Status struct {
	mu          sync.Mutex
	maxRestarts int
	samples     []Sample // the last round of live samples
	failures    int      // failed attempts (OnFailure runs once per attempt)
	attempts    int      // attempts begun; in a multi-host run, generations begun
	lastFailure *WorkerError
	results     int
	rendezvous  time.Duration
}

// NewStatus returns the status of a run that restarts at most maxRestarts times.
func NewStatus(maxRestarts int) *Status { return &Status{maxRestarts: maxRestarts} }

// Watch chains s into cfg's OnSample, OnFailure and OnAttempt hooks, keeping the hooks already set.
func (s *Status) Watch(cfg *Config) {
	prevSample, prevFailure, prevAttempt := cfg.OnSample, cfg.OnFailure, cfg.OnAttempt
	cfg.OnAttempt = func(n int) {
		s.mu.Lock()
		s.attempts++
		s.lastFailure = nil // a new attempt: healthy again until one of its workers fails
		s.samples = nil     // the last attempt's workers are gone
		s.mu.Unlock()
		if prevAttempt != nil {
			prevAttempt(n)
		}
	}
	cfg.OnSample = func(smp []Sample) {
		s.mu.Lock()
		s.samples = slices.Clone(smp)
		s.mu.Unlock()
		if prevSample != nil {
			prevSample(smp)
		}
	}
	cfg.OnFailure = func(we *WorkerError) {
		s.mu.Lock()
		s.failures++
		s.lastFailure = we
		s.mu.Unlock()
		if prevFailure != nil {
			prevFailure(we)
		}
	}
}

// ResultReceived counts one result accepted from a worker (the results engineer's hook).
func (s *Status) ResultReceived() {
	s.mu.Lock()
	s.results++
	s.mu.Unlock()
}

// SetRendezvous records how long the last multi-host rendezvous (join) took; it stays 0 on a single host.
func (s *Status) SetRendezvous(d time.Duration) {
	s.mu.Lock()
	s.rendezvous = d
	s.mu.Unlock()
}

// ServeHTTP serves /healthz and /metrics.
func (s *Status) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case "/healthz":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.lastFailure != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "unhealthy: %v\n", s.lastFailure)
			return
		}
		fmt.Fprintln(w, "ok")
	case "/metrics":
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.writeMetrics(w)
	default:
		http.NotFound(w, r)
	}
}

func (s *Status) writeMetrics(w io.Writer) {
	restarts := max(s.attempts-1, 0)
	fmt.Fprintf(w, "# HELP tpurun_workers Workers of this node by state (running: alive at the last live sample, taken every second; exited workers are not counted).\n# TYPE tpurun_workers gauge\n")
	fmt.Fprintf(w, "tpurun_workers{state=\"running\"} %d\n", len(s.samples))
	fmt.Fprintf(w, "# HELP tpurun_failed_attempts_total Attempts of the local group ended by a worker failure (one per attempt, however many workers failed in it).\n# TYPE tpurun_failed_attempts_total counter\n")
	fmt.Fprintf(w, "tpurun_failed_attempts_total %d\n", s.failures)
	fmt.Fprintf(w, "# HELP tpurun_restarts_total Whole-group restarts begun (multi-host: new generations of the world).\n# TYPE tpurun_restarts_total counter\n")
	fmt.Fprintf(w, "tpurun_restarts_total %d\n", restarts)
	fmt.Fprintf(w, "# HELP tpurun_max_restarts The --max-restarts limit of the run.\n# TYPE tpurun_max_restarts gauge\n")
	fmt.Fprintf(w, "tpurun_max_restarts %d\n", s.maxRestarts)
	fmt.Fprintf(w, "# HELP tpurun_worker_rss_bytes Resident set size of each live worker.\n# TYPE tpurun_worker_rss_bytes gauge\n")
	smp := slices.Clone(s.samples)
	slices.SortFunc(smp, func(a, b Sample) int { return a.Rank - b.Rank })
	for _, x := range smp {
		fmt.Fprintf(w, "tpurun_worker_rss_bytes{rank=\"%d\",pid=\"%d\"} %d\n", x.Rank, x.PID, x.RSS)
	}
	fmt.Fprintf(w, "# HELP tpurun_worker_cpu_seconds_total User+system CPU time of each live worker.\n# TYPE tpurun_worker_cpu_seconds_total counter\n")
	for _, x := range smp {
		fmt.Fprintf(w, "tpurun_worker_cpu_seconds_total{rank=\"%d\",pid=\"%d\"} %g\n", x.Rank, x.PID, x.CPU.Seconds())
	}
	fmt.Fprintf(w, "# HELP tpurun_results_received_total Results accepted from the workers.\n# TYPE tpurun_results_received_total counter\n")
	fmt.Fprintf(w, "tpurun_results_received_total %d\n", s.results)
	fmt.Fprintf(w, "# HELP tpurun_rendezvous_seconds How long the last multi-host rendezvous (join of the current generation) took; 0 on one host.\n# TYPE tpurun_rendezvous_seconds gauge\n")
	fmt.Fprintf(w, "tpurun_rendezvous_seconds %g\n", s.rendezvous.Seconds())
}

// ErrStatusAddr is returned by Serve for an address it refuses (not loopback without allowRemote).
var ErrStatusAddr = errors.New("status address refused")

// Serve listens on addr (host:port; port 0 picks one) and serves s until ctx is done. A host that is not a
// loopback address is refused unless allowRemote. It returns the bound address and a stop function that shuts
// the server down and waits for it.
func (s *Status) Serve(ctx context.Context, addr string, allowRemote bool) (net.Addr, func(), error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, &ConfigError{Field: "--status-addr", Value: addr, Hint: "use host:port, e.g. 127.0.0.1:9400 (port 0 picks a free one)"}
	}
	if !allowRemote {
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, nil, fmt.Errorf("%w: --status-addr %s is not a loopback address; the endpoint has no authentication: "+
				"use 127.0.0.1:PORT, or pass --status-allow-remote to expose it: %w", ErrStatusAddr, addr,
				&ConfigError{Field: "--status-addr", Value: addr, Hint: "use a loopback address or --status-allow-remote"})
		}
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, &ConfigError{Field: "--status-addr", Value: addr, Hint: fmt.Sprintf("cannot listen (%v); pick another port", err)}
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(l) })
	sctx, cancel := context.WithCancel(ctx)
	wg.Go(func() {
		<-sctx.Done()
		shut, done := context.WithTimeout(context.Background(), time.Second)
		defer done()
		_ = srv.Shutdown(shut)
	})
	return l.Addr(), func() { cancel(); wg.Wait() }, nil
}
