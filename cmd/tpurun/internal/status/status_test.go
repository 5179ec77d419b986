package status_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"tpurun/cmd/tpurun/internal/status"
	"tpurun/internal/attempt"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/spec"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestStatusHealthAndMetricsOverHTTP(t *testing.T) {
	st := status.NewMonitor(2)
	addr, stop, err := st.Serve(context.Background(), "127.0.0.1:0", false, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	base := "http://" + addr.String()
	st.Observe(spec.Event{Kind: spec.AttemptStarted, Attempt: 0})
	if code, body := get(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz before a failure: %d %q, want 200 ok", code, body)
	}
	st.Observe(spec.Event{Kind: spec.Sampled, Samples: []attempt.Sample{{PID: 41, Rank: 1, RSS: 2048, CPU: 1500 * time.Millisecond}, {PID: 40, Rank: 0, RSS: 1024}}})
	st.Observe(spec.Event{Kind: spec.ResultReceived})
	st.Observe(spec.Event{Kind: spec.ResultReceived})
	st.Observe(spec.Event{Kind: spec.WorkerFailed, Failure: &proc.WorkerError{Rank: 1, Exit: proc.Exit{PID: 41, ExitCode: 3}}})
	code, body := get(t, base+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "rank 1") {
		t.Fatalf("/healthz after a failure: %d %q, want 503 naming rank 1", code, body)
	}
	code, body = get(t, base+"/metrics")
	for _, want := range []string{
		`tpurun_workers{state="running"} 2`, "tpurun_failed_attempts_total 1", "tpurun_restarts_total 0", "tpurun_max_restarts 2",
		`tpurun_worker_rss_bytes{rank="0",pid="40"} 1024`, `tpurun_worker_rss_bytes{rank="1",pid="41"} 2048`,
		`tpurun_worker_cpu_seconds_total{rank="1",pid="41"} 1.5`, "tpurun_results_received_total 2",
		"tpurun_rendezvous_seconds 0", "# TYPE tpurun_workers gauge",
	} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %q:\n%s", code, want, body)
		}
	}
	if strings.Index(body, `rank="0"`) > strings.Index(body, `rank="1"`) {
		t.Errorf("per-rank series not sorted by rank:\n%s", body)
	}
	if code, _ := get(t, base+"/nope"); code != http.StatusNotFound {
		t.Errorf("/nope: %d, want 404", code)
	}
	// The restart begins: healthy again, one restart counted, the failure still counted.
	st.Observe(spec.Event{Kind: spec.AttemptStarted, Attempt: 1})
	if code, body := get(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz once the restarted attempt began: %d %q, want 200 ok", code, body)
	}
	_, body = get(t, base+"/metrics")
	for _, want := range []string{"tpurun_failed_attempts_total 1", "tpurun_restarts_total 1", `tpurun_workers{state="running"} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics after the restart lacks %q:\n%s", want, body)
		}
	}
}

func TestStatusRefusesNonLoopback(t *testing.T) {
	st := status.NewMonitor(0)
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:9400", ":9400"} {
		_, _, err := st.Serve(context.Background(), addr, false, zap.NewNop())
		var ce *failure.ConfigError
		if !errors.Is(err, status.ErrAddr) || !errors.As(err, &ce) || ce.Field != failure.StatusAddr {
			t.Errorf("Serve(%q): err %v, want ErrAddr and the status address's *ConfigError", addr, err)
		}
	}
	var ce *failure.ConfigError
	if _, _, err := st.Serve(context.Background(), "no-port", false, zap.NewNop()); !errors.As(err, &ce) {
		t.Errorf("Serve(no-port): err %v, want a *ConfigError", err)
	}
	_, stop, err := st.Serve(context.Background(), "[::]:0", true, zap.NewNop()) // explicitly allowed
	if err != nil {
		t.Fatalf("allowRemote: %v", err)
	}
	stop()
}
