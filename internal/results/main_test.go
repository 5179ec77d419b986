package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"tpurun/internal/testutil"
	"tpurun/worker"
)

// The test binary is also the Go worker (testutil's result verbs, which speak the contract exactly as a user's
// Go program would, or as a broken one would) and the stand-in for the tpurun binary (tpurun-cli, fakecli_test.go).
func init() {
	testutil.Register("report", "silent", "fail", "crash", "foreign", "seed0", "oversized", "truncated", "garbage",
		"version", "badjson", "twice", "reportgrandchild")
	testutil.Define(testutil.Verb{Name: "tpurun-cli", Run: func(w *testutil.Worker) int { return fakeCLI(w.Args) }})
	testutil.Define(testutil.Verb{Name: "hugeint", Run: hugeIntVerb})
}

// hugeIntVerb reports a 5000-digit integer: the Go client must refuse it (ErrHugeInteger); written raw on fd 3, the
// collector must.
func hugeIntVerb(w *testutil.Worker) int {
	rank, _ := strconv.Atoi(w.Rank)
	raw := os.NewFile(3, "raw")
	huge := json.RawMessage(strings.Repeat("7", 5000))
	if err := worker.NewClient(raw, nil).Report(rank, huge); !errors.Is(err, worker.ErrHugeInteger) {
		fmt.Fprintf(os.Stderr, "hugeint: the client sent a 5000-digit integer: %v\n", err)
		return 70
	}
	frame := append(worker.AppendHeader(nil, worker.KindResult, worker.EncodingJSON, rank, len(huge)+2), "["+string(huge)+"]"...)
	if _, err := raw.Write(frame); err != nil {
		fmt.Fprintln(os.Stderr, "hugeint:", err)
		return 70
	}
	return 0
}

func TestMain(m *testing.M) {
	testutil.Dispatch()
	code := testutil.Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// ran is one worker run through the collector exactly as the launcher will run it.
type ran struct {
	exit    RankExit
	consume error
	stdout  string
}

// launch starts cmd as worker rank owning replicas with the result channel on fd 3, feeds it to c.Consume in its
// own goroutine, and waits for both. before runs between start and wait (with the worker's stdout reader).
func launch(t *testing.T, c *Collector, rank, world int, replicas []int, cmd *exec.Cmd, before func(pid int, ino uint64, stdout *bufio.Reader)) ran {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd.ExtraFiles = []*os.File{w}
	id, err := worker.ChannelID(w)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(cmd.Env,
		"TPURUN_RESULT_FD=3", worker.EnvResultID+"="+id,
		"TPURUN_REPLICAS="+worker.FormatReplicas(replicas),
		"RANK="+strconv.Itoa(rank), "LOCAL_RANK="+strconv.Itoa(rank), "WORLD_SIZE="+strconv.Itoa(world),
		"TPURUN_RUN_ID=test-run")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	pid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- c.Consume(rank, pid, replicas, r) }()
	br := bufio.NewReader(out)
	if before != nil {
		before(pid, pipeInode(t, r), br)
	}
	rest, _ := io.ReadAll(br)
	werr := cmd.Wait()
	res := ran{exit: RankExit{Rank: rank, PID: pid, ExitCode: cmd.ProcessState.ExitCode()}, stdout: string(rest)}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.exit.ExitCode, res.exit.Signal = 128+int(ws.Signal()), ws.Signal().String()
	}
	res.consume = testutil.Done(t, fmt.Sprintf("rank %d: Consume to return after the worker exited (%v)", rank, werr), done)
	if stderr.Len() > 0 {
		t.Logf("rank %d stderr:\n%s", rank, stderr.String())
	}
	return res
}

// goCmd is the test binary as a Go worker doing verb (testutil's result verbs).
func goCmd(t *testing.T, verb string) *exec.Cmd {
	t.Helper()
	return testutil.Command(verb)
}

type spec struct {
	replicas []int
	cmd      *exec.Cmd
}

// runWorld launches every spec concurrently (rank = index) and returns their runs in rank order.
func runWorld(t *testing.T, c *Collector, specs []spec) []ran {
	t.Helper()
	out := make([]ran, len(specs))
	done := make(chan int, len(specs))
	for i, s := range specs {
		go func() {
			out[i] = launch(t, c, i, len(specs), s.replicas, s.cmd, nil)
			done <- i
		}()
	}
	for range specs {
		<-done
	}
	return out
}

func exitsOf(runs []ran) []RankExit {
	e := make([]RankExit, len(runs))
	for i, r := range runs {
		e[i] = r.exit
	}
	return e
}

// contractErrors returns the *ContractError leaves of a joined error.
func contractErrors(err error) []*ContractError {
	var out []*ContractError
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			if ce, ok := err.(*ContractError); ok {
				out = append(out, ce)
				return
			}
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}

func only(t *testing.T, err error, kind error) *ContractError {
	t.Helper()
	ces := contractErrors(err)
	if len(ces) != 1 || !errors.Is(err, kind) {
		t.Fatalf("want exactly one %v, got %d violations: %v", kind, len(ces), err)
	}
	return ces[0]
}

func pipeInode(t *testing.T, f *os.File) uint64 {
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}
