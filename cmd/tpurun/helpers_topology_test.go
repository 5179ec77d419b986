package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"tpurun/internal/testutil"
)

// The hosts' workers are testutil's envdump:DIR (each writes its whole environment as JSON to DIR/<RANK>.json);
// one verb is this package's own:
//   - hold:PATH, a process that holds PATH open (like a TPU runtime holding /dev/vfio/N) until its stdin closes.
func init() {
	testutil.Register("envdump")
	testutil.Define(testutil.Verb{Name: "hold", Run: func(w *testutil.Worker) int {
		f, err := os.Open(w.Arg)
		if err != nil {
			fmt.Println("open:", err)
			return 3
		}
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = f.Close()
		return 0
	}})
}

// host is a fake /sys and /dev tree of one accelerator host, plus a clean environment for tpurun.
type host struct {
	sys, dev string
	dumps    string   // where envdump workers write
	env      []string // tpurun's whole environment (nothing inherited from the test process)
	wd       string   // tpurun's working directory; "" is the test's
}

// Google PCI device ids of the fake trees.
const (
	idV4  = "0x005e" // /dev/accelN
	idV5e = "0x0063" // /dev/vfio/N
	idV6e = "0x006f" // /dev/vfio/N
)

// newHost builds n Google PCI devices with device id (and their device nodes) and an environment whose metadata
// server refuses connections, so that no test ever reaches a real one.
func newHost(t *testing.T, id string, n int) *host {
	t.Helper()
	d := testutil.TPUFunctions
	d.Device = id
	if id == idV4 {
		d.Node = "accel%d"
	}
	h := &host{dumps: filepath.Join(t.TempDir(), "dumps")}
	h.sys, h.dev = testutil.FakePCIHost(t, d, n)
	mustDo(t, os.MkdirAll(h.dumps, 0o755))
	if id != idV4 && n > 0 {
		mustDo(t, os.WriteFile(filepath.Join(h.dev, "vfio", "vfio"), nil, 0o644)) // the VFIO container node
	}
	h.env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "GCE_METADATA_HOST=" + refusedAddr(t),
		testutil.Fake("envdump:" + h.dumps)}
	return h
}

// newGPUHost is a fake /sys and /dev of an NVIDIA host with n H100s (vendor 0x10de, device 0x2330, a 3D
// controller) and /dev/nvidia0..n-1, with the same clean environment as newHost.
func newGPUHost(t *testing.T, n int) *host {
	t.Helper()
	h := newHost(t, idV4, 0)
	h.sys, h.dev = testutil.FakePCIHost(t, testutil.H100Functions, n)
	return h
}

// refusedAddr is host:port of a TCP socket that is bound but not listening: connections are refused, and the port
// stays reserved (no other test's server can take it) until the test ends.
func refusedAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	mustDo(t, err)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	mustDo(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	sa, err := syscall.Getsockname(fd)
	mustDo(t, err)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// portBase returns a port p such that p..p+15 were free a moment ago, so parallel tests don't share TPU ports.
func portBase(t *testing.T) int {
	t.Helper()
	// Below the kernel's ephemeral range (32768-60999 by default), so that many open connections on this machine
	// (other tests' clients) do not crowd the search out.
	for try := 0; try < 200; try++ {
		p := 20000 + rand.IntN(12000)
		ok := true
		for i := 0; i < 16 && ok; i++ {
			if l2, err := net.Listen("tcp", fmt.Sprintf(":%d", p+i)); err != nil {
				ok = false
			} else {
				_ = l2.Close()
			}
		}
		if ok {
			return p
		}
	}
	t.Fatal("no 16 consecutive free ports")
	return 0
}

// cli runs the real tpurun binary with the host's fake roots and environment (plus extra env).
func (h *host) cli(t *testing.T, extraEnv []string, args ...string) result {
	t.Helper()
	full := append([]string{"--sysfs-root", h.sys, "--dev-root", h.dev}, args...)
	if len(args) > 0 && (args[0] == "plan" || args[0] == "doctor") {
		full = append([]string{args[0], "--sysfs-root", h.sys, "--dev-root", h.dev}, args[1:]...)
	}
	cmd := exec.Command(filepath.Join(bin, "tpurun"), full...)
	cmd.Env = append(append([]string(nil), h.env...), extraEnv...)
	cmd.Dir = h.wd
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := testutil.WaitExit(t, cmd) // bounded: "seconds, not minutes" (DESIGN.md) is the deadline
	return result{code, out.String(), errb.String()}
}

// planJSON is the output of `tpurun plan --format json`.
type planJSON struct {
	Device  string                             `json:"device"`
	Nodes   []struct{ Rank, LocalWorkers int } `json:"nodes"`
	Workers []struct {
		Rank      int               `json:"rank"`
		LocalRank int               `json:"local_rank"`
		NodeRank  int               `json:"node_rank"`
		Replicas  []int             `json:"replicas"`
		Env       map[string]string `json:"env"`
	} `json:"workers"`
}

func (h *host) plan(t *testing.T, extraEnv []string, args ...string) planJSON {
	t.Helper()
	r := h.cli(t, extraEnv, append([]string{"plan", "--format", "json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("tpurun plan %q: exit %d\n%s", args, r.code, r.stderr)
	}
	var p planJSON
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		t.Fatalf("tpurun plan --format json: %v\n%s", err, r.stdout)
	}
	return p
}

// dumped reads the env each envdump worker wrote, by rank.
func (h *host) dumped(t *testing.T) map[string]map[string]string {
	t.Helper()
	es, err := os.ReadDir(h.dumps)
	mustDo(t, err)
	out := map[string]map[string]string{}
	for _, e := range es {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(h.dumps, e.Name()))
		mustDo(t, err)
		env := map[string]string{}
		mustDo(t, json.Unmarshal(b, &env))
		out[strings.TrimSuffix(e.Name(), ".json")] = env
	}
	return out
}

// hold starts the test binary as a process that holds path open; it returns the pid, and the holder exits at
// cleanup.
func hold(t *testing.T, path string) int {
	t.Helper()
	cmd := testutil.Command("hold:" + path)
	stdin, err := cmd.StdinPipe()
	mustDo(t, err)
	stdout, err := cmd.StdoutPipe()
	mustDo(t, err)
	mustDo(t, cmd.Start())
	t.Cleanup(func() {
		_ = stdin.Close()
		testutil.WaitExit(t, cmd)
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("holder of %s did not get ready: %q %v", path, line, err)
	}
	return cmd.Process.Pid
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
