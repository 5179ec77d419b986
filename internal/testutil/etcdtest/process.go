package etcdtest

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"

	"go.etcd.io/etcd/server/v3/embed"

	"tpurun/internal/testutil"
)

// ProcessVerb is the fake-worker verb (testutil) that makes the test binary a one-member etcd server of its
// own: "etcdserver:DIR" serves from data directory DIR, prints "etcd HOST:PORT" (its client endpoint) once it
// serves, and runs until it is killed or its stdin closes. A package whose tests call StartProcess Defines it in
// an init function.
var ProcessVerb = testutil.Verb{Name: "etcdserver", Run: serveProcess}

func serveProcess(w *testutil.Worker) int {
	cfg := embed.NewConfig()
	cfg.Name = "m0"
	cfg.Dir = w.Arg
	cu := url.URL{Scheme: "http", Host: freeEndpoint()}
	pu := url.URL{Scheme: "http", Host: freeEndpoint()}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.LogLevel = "panic"
	cfg.TickMs, cfg.ElectionMs = tickMs, electionMs
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd process:", err)
		return 3
	}
	<-e.Server.ReadyNotify() // the test waits for the line below under its deadline
	fmt.Printf("etcd %s\n", cu.Host)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test ends (its end of the pipe closes) or kills this process
	e.Close()
	return 0
}

// freeEndpoint is a loopback host:port that was free a moment ago (in the etcd process: no test to fail).
func freeEndpoint() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// StartProcess starts a real one-member etcd as a process of its own (the test binary re-executed doing
// ProcessVerb), so that a test can crash it with SIGKILL, and returns its client endpoint once it answers a read
// through its leader, and the process; it is killed and reaped at cleanup. Like Start, it takes t's heavy-test slot.
func StartProcess(t testing.TB) (string, *os.Process) {
	t.Helper()
	testutil.Heavy(t)
	cmd := testutil.Command(ProcessVerb.Name + ":" + t.TempDir())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &testutil.Buffer{}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := out.WaitFor(t, "\n")
	ep, ok := strings.CutPrefix(strings.TrimSpace(line), "etcd ")
	if !ok {
		t.Fatalf("etcd process said %q", line)
	}
	waitRead(t, ep, "the etcd process to answer a read", func() error { return nil })
	return ep, cmd.Process
}
