package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"tpurun/internal/testutil"
)

// The status endpoint answers real HTTP requests while a run is going: /healthz 200 and /metrics with the live
// per-rank RSS and CPU of both workers.
// watchStatusAddr reads tpurun's stderr from r to EOF in the background and returns the status address tpurun
// announced on it, and a function that waits for EOF and returns everything read.
func watchStatusAddr(t *testing.T, r io.Reader) (string, func() string) {
	t.Helper()
	addrRe := regexp.MustCompile(`status on http://([^/\s]+)/metrics`)
	found := make(chan string, 1)
	var all strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if m := addrRe.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	addr := testutil.Done(t, "tpurun to print the status address on stderr", found)
	return addr, func() string { <-done; return all.String() }
}

// startWithStatus starts tpurun with nprocs hanging workers and a status endpoint, and returns it with the address
// it announced and what reads the rest of its stderr (see watchStatusAddr).
func startWithStatus(t *testing.T, nprocs string) (*exec.Cmd, string, func() string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "tpurun"), "--nprocs", nprocs, "--device", "cpu", "--grace", "2s",
		"--status-addr", "127.0.0.1:0", "--", testutil.Program(t))
	cmd.Env = append(os.Environ(), testutil.Fake("hang"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr, all := watchStatusAddr(t, stderr)
	return cmd, addr, all
}

func TestStatusEndpointDuringRun(t *testing.T) {
	cmd, addr, _ := startWithStatus(t, "2")
	fetch := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := fetch("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz during a healthy run: %d %q", code, body)
	}
	testutil.WaitFor(t, "/metrics to show both live workers", func() error {
		_, body := fetch("/metrics")
		if strings.Contains(body, `tpurun_workers{state="running"} 2`) &&
			regexp.MustCompile(`tpurun_worker_rss_bytes\{rank="0",pid="\d+"\} [1-9]\d*`).MatchString(body) &&
			regexp.MustCompile(`tpurun_worker_cpu_seconds_total\{rank="1",pid="\d+"\} `).MatchString(body) {
			return nil
		}
		return fmt.Errorf("/metrics:\n%s", body)
	})
	if _, body := fetch("/metrics"); !strings.Contains(body, "\ntpurun_rendezvous_seconds 0\n") { // one host: no rendezvous
		t.Errorf("/metrics of a single host lacks tpurun_rendezvous_seconds 0 (README):\n%s", body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := testutil.WaitExit(t, cmd); code != 143 {
		t.Fatalf("tpurun after SIGTERM: exit %d, want 143", code)
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("the status endpoint still answers after tpurun exited")
	}
}

func TestStatusAddrNonLoopbackRefused(t *testing.T) {
	r := runCLI(t, "", nil, "--nprocs", "1", "--device", "cpu", "--status-addr", "0.0.0.0:0", "--", testutil.Program(t))
	if r.code != 2 || !strings.Contains(r.stderr, "--status-allow-remote") {
		t.Fatalf("exit %d, stderr %q: want 2 and the --status-allow-remote remedy", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "--status-addr"); n != 1 { // it said "--status-addr --status-addr 0.0.0.0:0: ..."
		t.Errorf("the refusal names --status-addr %d times, want once:\n%s", n, r.stderr)
	}
}

// TestStatusLineAfterTheSignalsAreCaught: once tpurun has announced its status endpoint, a SIGTERM is tpurun's to
// act on: it stops the run and exits 143 itself. The announcement came before the signals were caught, and a SIGTERM
// sent as soon as it was read killed tpurun by its default action (no exit code, no summary, the status endpoint
// left without a word).
func TestStatusLineAfterTheSignalsAreCaught(t *testing.T) {
	for i := range 5 {
		cmd, _, all := startWithStatus(t, "1")
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := testutil.WaitExit(t, cmd); code != 143 {
			t.Fatalf("run %d: SIGTERM right after the status line: exit %d (%s), want 143\n%s", i, code, cmd.ProcessState,
				all())
		}
	}
}
