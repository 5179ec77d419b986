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
	"time"

	"go.uber.org/goleak"

	"tpurun/worker"
)

// The test binary is also the Go worker: TestMain runs a worker mode when TPURUN_TEST_WORKER is set.
const envMode = "TPURUN_TEST_WORKER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(envMode); mode == "tpurun-cli" {
		os.Exit(fakeCLI(os.Args[1:]))
	} else if mode != "" {
		os.Exit(goWorker(mode))
	}
	goleak.VerifyTestMain(m)
}

// goWorker is a worker process speaking the contract exactly as a user's Go program would.
func goWorker(mode string) int {
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	die := func(err error) int {
		fmt.Fprintf(os.Stderr, "worker rank %d mode %s: %v\n", rank, mode, err)
		return 70
	}
	reportOwn := func() error {
		reps, err := worker.Replicas()
		if err != nil {
			return err
		}
		for _, r := range reps {
			if err := worker.Report(r, map[string]any{"replica": r, "rank": rank, "lang": "go"}); err != nil {
				return err
			}
		}
		return nil
	}
	// raw writes to fd 3 without the client's checks, as a buggy or foreign writer would.
	raw := os.NewFile(3, "raw")
	switch mode {
	case "report":
		if err := reportOwn(); err != nil {
			return die(err)
		}
	case "silent":
	case "fail":
		reps, _ := worker.Replicas()
		if err := worker.Fail(reps[0], fmt.Errorf("rank %d: loss is NaN", rank)); err != nil {
			return die(err)
		}
		return 1
	case "crash":
		return 13
	case "foreign":
		if err := reportOwn(); err != nil {
			return die(err)
		}
		c := worker.NewClient(raw, nil)
		if err := c.Report(99, "not mine"); err != nil {
			return die(err)
		}
	case "seed0": // believes it is replica 0, whatever it owns
		if err := worker.NewClient(raw, nil).Report(0, map[string]any{"replica": 0, "rank": rank}); err != nil {
			return die(err)
		}
	case "oversized":
		c := worker.NewClient(raw, nil)
		if err := c.Report(rank, strings.Repeat("x", 8192)); err != nil {
			return die(err)
		}
		if err := reportOwn(); err != nil {
			return die(err)
		}
	case "truncated":
		if err := reportOwn(); err != nil {
			return die(err)
		}
		hdr := worker.AppendHeader(nil, worker.KindResult, worker.EncodingJSON, rank, 100)
		raw.Write(append(hdr, `"only part`...))
	case "garbage":
		if err := reportOwn(); err != nil {
			return die(err)
		}
		// More garbage than a pipe holds: the collector must drain it or this worker blocks forever.
		raw.Write(bytes.Repeat([]byte("Traceback (most recent call last): garbage\n"), 50000))
	case "version":
		hdr := worker.AppendHeader(nil, worker.KindResult, worker.EncodingJSON, rank, 2)
		hdr[4] = 9
		raw.Write(append(hdr, "{}"...))
	case "badjson":
		if _, err := raw.Write(append(worker.AppendHeader(nil, worker.KindResult, worker.EncodingJSON, rank, 5), "{nope"...)); err != nil {
			return die(err)
		}
	case "hugeint": // a 5000-digit integer: the client refuses it; written raw, the collector must
		huge := json.RawMessage(strings.Repeat("7", 5000))
		if err := worker.NewClient(raw, nil).Report(rank, huge); !errors.Is(err, worker.ErrHugeInteger) {
			return die(fmt.Errorf("the client sent a 5000-digit integer: %v", err))
		}
		if _, err := raw.Write(append(worker.AppendHeader(nil, worker.KindResult, worker.EncodingJSON, rank, len(huge)+2), "["+string(huge)+"]"...)); err != nil {
			return die(err)
		}
	case "twice":
		if err := reportOwn(); err != nil {
			return die(err)
		}
		if err := reportOwn(); err != nil {
			return die(err)
		}
	case "grandchild":
		// Open the channel first (marks it close-on-exec), then start a grandchild that outlives us.
		reps, err := worker.Replicas()
		if err != nil {
			return die(err)
		}
		if err := worker.Report(reps[0], "before the grandchild"); err != nil {
			return die(err)
		}
		self, _ := os.Executable()
		gc := exec.Command(self)
		gc.Env = append(os.Environ(), envMode+"=sleep")
		if err := gc.Start(); err != nil {
			return die(err)
		}
		fmt.Println(gc.Process.Pid)
	case "sleep":
		time.Sleep(time.Minute)
	default:
		return die(fmt.Errorf("unknown mode"))
	}
	return 0
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
	select {
	case res.consume = <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("rank %d: Consume did not return 20s after the worker exited (%v); stderr:\n%s", rank, werr, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("rank %d stderr:\n%s", rank, stderr.String())
	}
	return res
}

// goCmd is the test binary as a Go worker in mode.
func goCmd(t *testing.T, mode string) *exec.Cmd {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envMode+"="+mode)
	return cmd
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
