// Package launchertest is the test plumbing shared by tpurun's tests (launcher, cmd/tpurun, rendezvous): the test
// binary re-exec'd as a fake worker, the directory those workers report into, "all gone" assertions that prove a
// process is dead with kill(pid, 0) == ESRCH, a buffer safe for concurrent writers, and deadline polling. Like
// net/http/httptest it is for tests only.
package launchertest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"golang.org/x/sys/unix"

	"tpurun/worker"
)

// RunFakeWorker turns the process into a fake worker when a launcher started it as one (FAKE_DIR set): call it
// first thing in TestMain. It returns only in the test binary itself.
func RunFakeWorker() {
	if os.Getenv("FAKE_DIR") != "" {
		os.Exit(FakeWorker())
	}
}

// SetSubreaper makes the test binary the child subreaper, so orphaned grandchildren are re-parented to it and
// AssertAllGone can reap them and prove kill(pid, 0) == ESRCH even where PID 1 does not reap.
func SetSubreaper() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, 36 /* PR_SET_CHILD_SUBREAPER */, 1, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", errno)
	}
	return nil
}

// FakeWorker is the body of a fake worker process: the test binary re-exec'd by a launcher with FAKE_DIR set
// (see RunFakeWorker). TPURUN_FAKE (or TPURUN_FAKE_<RANK> for one rank) selects what it does, as verb[:n]:
// exit, exitready (exit once every rank is ready), sigkill, hang, hanguntil (hang before restart n), ignoreterm, onsignal/onterm (exit n on SIGTERM or
// SIGUSR1), grandchild, escape, escapeclean, lines, env, failuntil, record, result (raw bytes on fd 3), report (a
// good result per replica). Every fake process records its pid in $FAKE_DIR/pids/<pid> and, once its signal
// handling is set up, marks $FAKE_DIR/ready/<rank>.
func FakeWorker() int {
	dir := os.Getenv("FAKE_DIR")
	rank := os.Getenv("RANK")
	_ = os.WriteFile(filepath.Join(dir, "pids", strconv.Itoa(os.Getpid())), nil, 0o644)
	behaviour := os.Getenv("TPURUN_FAKE")
	if b, ok := os.LookupEnv("TPURUN_FAKE_" + rank); ok {
		behaviour = b
	}
	if os.Getenv("FAKE_GRANDCHILD") != "" {
		behaviour = "hang"
	}
	verb, arg, _ := strings.Cut(behaviour, ":")
	n, _ := strconv.Atoi(arg)
	ready := func() { _ = os.WriteFile(filepath.Join(dir, "ready", rank), nil, 0o644) }
	allReady := func() { // wait until every rank is ready, so a failure never races the others' setup
		world, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
		for {
			if es, _ := os.ReadDir(filepath.Join(dir, "ready")); len(es) >= world {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	switch verb {
	case "exit":
		ready()
		fmt.Printf("rank %s exits %d\n", rank, n)
		return n
	case "exitready": // exit n once every rank is ready
		ready()
		allReady()
		fmt.Printf("rank %s exits %d\n", rank, n)
		return n
	case "sigkill":
		ready()
		allReady()
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case "hang":
		ready()
		select {}
	case "ignoreterm":
		signal.Ignore(syscall.SIGTERM)
		ready()
		select {}
	case "onsignal", "onterm": // exit n on SIGTERM or SIGUSR1
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGUSR1)
		ready()
		s := <-c
		fmt.Println("got", unix.SignalName(s.(syscall.Signal)))
		return n
	case "grandchild", "escape", "escapeclean":
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "FAKE_GRANDCHILD=1")
		if verb == "escapeclean" { // leaves the run: new session and no TPURUN_RUN_ID or TPURUN_SWEEP_TAG
			cmd.Env = nil
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "TPURUN_RUN_ID=") && !strings.HasPrefix(kv, "TPURUN_SWEEP_TAG=") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, "FAKE_GRANDCHILD=1")
		}
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.ExtraFiles = []*os.File{os.NewFile(3, "result")}
		if verb != "grandchild" {
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "start grandchild:", err)
			return 99
		}
		// wait until the grandchild has recorded its pid, so the test knows it
		for {
			if _, err := os.Stat(filepath.Join(dir, "pids", strconv.Itoa(cmd.Process.Pid))); err == nil {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		ready()
		return n
	case "lines":
		w := bufio.NewWriterSize(os.Stdout, 4096)
		for i := 0; i < n; i++ {
			fmt.Fprintf(w, "rank %s line %d %s\n", rank, i, strings.Repeat("x", i%50))
		}
		fmt.Fprintf(w, "rank %s partial", rank)
		_ = w.Flush()
		return 0
	case "env":
		b, _ := json.Marshal(map[string]any{"env": os.Environ(), "args": os.Args[1:]})
		_ = os.WriteFile(filepath.Join(dir, "env-"+rank+".json"), b, 0o644)
		return 0
	case "hanguntil": // hang while TORCHELASTIC_RESTART_COUNT < n, then exit 0
		if c, _ := strconv.Atoi(os.Getenv("TORCHELASTIC_RESTART_COUNT")); c >= n {
			ready()
			fmt.Printf("rank %s of %s exits 0 in generation %d\n", rank, os.Getenv("WORLD_SIZE"), c)
			return 0
		}
		ready()
		select {}
	case "failuntil": // fail while TORCHELASTIC_RESTART_COUNT < n
		c, _ := strconv.Atoi(os.Getenv("TORCHELASTIC_RESTART_COUNT"))
		if c < n {
			return 3
		}
		return 0
	case "record": // what PyTorch's @record does on an uncaught exception
		ready()
		allReady()
		fmt.Fprintln(os.Stderr, "Traceback (most recent call last):")
		fmt.Fprintln(os.Stderr, "ValueError: bad learning rate")
		rec := fmt.Sprintf(`{"message": {"message": "ValueError: bad learning rate", "extraInfo": {"py_callstack": %q, "timestamp": "1"}}}`,
			"Traceback (most recent call last):\n  File \"train.py\", line 3, in main\nValueError: bad learning rate\n")
		_ = os.WriteFile(os.Getenv("TORCHELASTIC_ERROR_FILE"), []byte(rec), 0o644)
		return n
	case "result": // raw bytes on the result channel: not a frame
		f := os.NewFile(3, "result")
		fmt.Fprintf(f, "result of rank %s replicas %s", rank, os.Getenv("TPURUN_REPLICAS"))
		return 0
	case "report": // one good result per owned replica, through the Go client
		reps, err := worker.Replicas()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 97
		}
		for _, r := range reps {
			if err := worker.Report(r, "rank "+rank); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 96
			}
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "fake worker: unknown behaviour %q\n", behaviour)
	return 98
}

// FakeDir makes the directory fake workers report into.
func FakeDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	for _, s := range []string{"pids", "ready"} {
		if err := os.Mkdir(filepath.Join(d, s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// PIDs lists every fake process that ran, grandchildren included.
func PIDs(t testing.TB, dir string) []int {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range es {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pid)
	}
	return out
}

// AssertAllGone proves that every recorded pid is gone: kill(pid, 0) == ESRCH within the deadline. Zombies
// re-parented to this (subreaper) test binary are reaped first; a zombie is dead but still has a pid.
func AssertAllGone(t testing.TB, dir string, want int, within time.Duration) {
	t.Helper()
	ps := PIDs(t, dir)
	if len(ps) < want {
		t.Fatalf("only %d fake processes recorded their pid, want at least %d", len(ps), want)
	}
	deadline := time.Now().Add(within)
	for _, pid := range ps {
		for {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			err := syscall.Kill(pid, 0)
			if errors.Is(err, syscall.ESRCH) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pid %d is still alive %s after the run (kill(pid,0) = %v)", pid, within, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// WaitReady waits until n fake workers have marked themselves ready, or fails the test after 10 s.
func WaitReady(t testing.TB, dir string, n int) {
	t.Helper()
	Eventually(t, 10*time.Second, func() bool {
		es, _ := os.ReadDir(filepath.Join(dir, "ready"))
		return len(es) >= n
	}, fmt.Sprintf("%d workers ready", n))
}

// Eventually polls cond every few milliseconds until it holds, or fails the test after within naming what.
func Eventually(t testing.TB, within time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers (the launcher's forwarders).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FreeEndpoint is a loopback host:port that was free a moment ago.
func FreeEndpoint(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// StartEtcd starts a real one-member etcd server (temp dir, loopback ports) and returns its client endpoint.
func StartEtcd(t testing.TB) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "m0"
	cfg.Dir = t.TempDir()
	cu := url.URL{Scheme: "http", Host: FreeEndpoint(t)}
	pu := url.URL{Scheme: "http", Host: FreeEndpoint(t)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.LogLevel = "panic"
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); <-e.Server.StopNotify() })
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(20 * time.Second):
		t.Fatal("etcd not ready")
	}
	return cu.Host
}

// etcdChildEnv marks the test binary re-exec'd as an etcd server by StartEtcdProcess; its value is the data dir.
const etcdChildEnv = "LAUNCHERTEST_ETCD_DIR"

// RunEtcdChild turns the process into a real etcd server when StartEtcdProcess started it: call it first thing
// in TestMain. It serves until it is killed or its stdin closes, and returns only in the test binary itself.
func RunEtcdChild() {
	dir := os.Getenv(etcdChildEnv)
	if dir == "" {
		return
	}
	cfg := embed.NewConfig()
	cfg.Name = "m0"
	cfg.Dir = dir
	cu := url.URL{Scheme: "http", Host: freeEndpoint()}
	pu := url.URL{Scheme: "http", Host: freeEndpoint()}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.LogLevel = "panic"
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd child:", err)
		os.Exit(3)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(20 * time.Second):
		fmt.Fprintln(os.Stderr, "etcd child: not ready after 20s")
		os.Exit(4)
	}
	fmt.Printf("etcd %s\n", cu.Host)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test ends (its end of the pipe closes) or kills this process
	e.Close()
	os.Exit(0)
}

func freeEndpoint() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// StartEtcdProcess starts a real one-member etcd server as a process of its own (the test binary re-exec'd; its
// TestMain must call RunEtcdChild), so that a test can crash it with SIGKILL. It returns the client endpoint once
// etcd serves, and the process; cleanup kills and reaps it.
func StartEtcdProcess(t testing.TB) (string, *os.Process) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), etcdChildEnv+"="+t.TempDir())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case l, ok := <-line:
		ep, found := strings.CutPrefix(l, "etcd ")
		if !ok || !found {
			t.Fatalf("etcd process said %q", l)
		}
		return ep, cmd.Process
	case <-time.After(30 * time.Second):
		t.Fatal("etcd process not serving after 30s")
	}
	return "", nil
}
