package status

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/netutil"

	"tpurun/internal/attempt"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/spec"
)

// Monitor is the live state of a job as the status endpoint serves it: /healthz (200 while healthy, 503 from a
// worker failure until a restarted attempt begins, and for good when none does) and /metrics (Prometheus text
// format). It is a spec.Observer: put it in spec.Spec.Observers, and serve it with Serve. The zero value is
// not usable: use NewMonitor.
type Monitor struct {
	mu          sync.Mutex
	maxRestarts int
	samples     []attempt.Sample // the last round of live samples
	failures    int              // failed attempts (one WorkerFailed per attempt)
	attempts    int              // attempts begun; in a multi-host job, generations begun
	lastFailure *proc.WorkerError
	results     int
	rendezvous  time.Duration
}

// NewMonitor returns the monitor of a job that restarts at most maxRestarts times.
func NewMonitor(maxRestarts int) *Monitor { return &Monitor{maxRestarts: maxRestarts} }

// Observe records one event of the job.
func (s *Monitor) Observe(e spec.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch e.Kind {
	case spec.AttemptStarted:
		s.attempts++
		s.lastFailure = nil // a new attempt: healthy again until one of its workers fails
		s.samples = nil     // the last attempt's workers are gone
	case spec.Sampled:
		s.samples = slices.Clone(e.Samples)
	case spec.WorkerFailed:
		s.failures++
		s.lastFailure = e.Failure
	case spec.ResultReceived:
		s.results++
	case spec.RendezvousDone:
		s.rendezvous = e.Rendezvous
	}
}

// ServeHTTP serves /healthz and /metrics.
// The state is rendered under the lock and written after it is released: a client that never reads cannot
// hold the lock the supervisor's events need.
func (s *Monitor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	code := http.StatusOK
	s.mu.Lock()
	switch r.URL.Path {
	case "/healthz":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.lastFailure != nil {
			code = http.StatusServiceUnavailable
			fmt.Fprintf(&b, "unhealthy: %v\n", s.lastFailure)
		} else {
			fmt.Fprintln(&b, "ok")
		}
	case "/metrics":
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.writeMetrics(&b)
	default:
		code = http.StatusNotFound
		b.WriteString("404 page not found\n")
	}
	s.mu.Unlock()
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

func (s *Monitor) writeMetrics(w io.Writer) {
	restarts := max(s.attempts-1, 0)
	fmt.Fprintf(w, "# HELP tpurun_workers Workers of this node by state (running: alive at the last live sample, taken every second; exited workers are not counted).\n# TYPE tpurun_workers gauge\n")
	fmt.Fprintf(w, "tpurun_workers{state=\"running\"} %d\n", len(s.samples))
	fmt.Fprintf(w, "# HELP tpurun_failed_attempts_total Attempts of the local group ended by a worker failure (one per attempt, however many workers failed in it).\n# TYPE tpurun_failed_attempts_total counter\n")
	fmt.Fprintf(w, "tpurun_failed_attempts_total %d\n", s.failures)
	fmt.Fprintf(w, "# HELP tpurun_restarts_total Whole-group restarts begun (multi-host: new generations of the world).\n# TYPE tpurun_restarts_total counter\n")
	fmt.Fprintf(w, "tpurun_restarts_total %d\n", restarts)
	fmt.Fprintf(w, "# HELP tpurun_max_restarts The restart limit of the run (max restarts).\n# TYPE tpurun_max_restarts gauge\n")
	fmt.Fprintf(w, "tpurun_max_restarts %d\n", s.maxRestarts)
	fmt.Fprintf(w, "# HELP tpurun_worker_rss_bytes Resident set size of each live worker.\n# TYPE tpurun_worker_rss_bytes gauge\n")
	smp := slices.Clone(s.samples)
	slices.SortFunc(smp, func(a, b attempt.Sample) int { return a.Rank - b.Rank })
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

// ErrAddr is returned by Serve for an address it refuses (not loopback without allowRemote). The error is also the
// *failure.ConfigError of the status address, whose hint names the way on (--status-allow-remote).
var ErrAddr = errors.New("status address refused")

// remoteRefused is Serve's refusal of an address off loopback: the configuration error, which is also ErrAddr.
type remoteRefused struct{ err *failure.ConfigError }

func (e remoteRefused) Error() string   { return e.err.Error() }
func (e remoteRefused) Unwrap() []error { return []error{ErrAddr, e.err} }

// The status server's limits: a client gets this long to send its request and read the answer, an idle
// keep-alive connection is closed after idleTimeout, and at most maxConns connections are open at once (the
// rest wait in the kernel's backlog), so idle clients can neither exhaust file descriptors nor hold the server.
const (
	timeout     = 5 * time.Second
	idleTimeout = 30 * time.Second
	maxConns    = 32
)

// Serve listens on addr (host:port; port 0 picks one) and serves s until ctx is done. A host that is not a
// loopback address is refused unless allowRemote. The server's own errors go to log. It returns the bound address
// and a stop function that shuts the server down and waits for it.
func (s *Monitor) Serve(ctx context.Context, addr string, allowRemote bool, log *zap.Logger) (net.Addr, func(), error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, &failure.ConfigError{Field: failure.StatusAddr, Value: addr, Hint: "use host:port, e.g. 127.0.0.1:9400 (port 0 picks a free one)"}
	}
	if !allowRemote {
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, nil, remoteRefused{&failure.ConfigError{Field: failure.StatusAddr, Value: addr,
				Hint: "not a loopback address, and the endpoint has no authentication: use 127.0.0.1:PORT, or allow remote clients with --status-allow-remote"}}
		}
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, &failure.ConfigError{Field: failure.StatusAddr, Value: addr, Hint: fmt.Sprintf("cannot listen (%v); pick another port", err)}
	}
	errLog, _ := zap.NewStdLogAt(log.Named("status"), zap.WarnLevel)
	srv := &http.Server{Handler: s, ReadHeaderTimeout: timeout, ReadTimeout: timeout,
		WriteTimeout: timeout, IdleTimeout: idleTimeout, ErrorLog: errLog}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(netutil.LimitListener(l, maxConns)) })
	sctx, cancel := context.WithCancel(ctx)
	wg.Go(func() {
		<-sctx.Done()
		shut, done := context.WithTimeout(context.Background(), time.Second)
		defer done()
		_ = srv.Shutdown(shut)
		_ = srv.Close()
	})
	return l.Addr(), func() { cancel(); wg.Wait() }, nil
}
