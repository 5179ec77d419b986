package results

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"tpurun/worker"
)

// fakeCLI is the test binary standing in for the tpurun binary in the tests of the Python spawn() and run()
// (package results cannot build cmd/tpurun): it takes the flags spawn() passes, starts the function-mode Python
// workers as the launcher does (the write end of a pipe on fd 3, TPURUN_RESULT_ID, the per-rank variables, a
// parent-death signal), collects their frames with the real Collector and prints the real document as the last
// thing on stdout (with --json-frames, after its pickled values as frames, as the real one does); worker output goes
// to stderr, as with --json. With --json-fd N the document goes to descriptor N and the workers' stdout to stdout.
//
// The environment steers it: FAKE_ARGV (a file to record argv and the function-mode variables in),
// FAKE_CONFIG_ERROR (print it as tpurun prints a configuration error and exit 2 before starting anything),
// FAKE_IGNORE_TERM (ignore SIGTERM, as a wedged launcher would; otherwise SIGTERM stops the workers' groups and
// the run ends with the document and exit 143).
func fakeCLI(args []string) int {
	if p := os.Getenv("FAKE_ARGV"); p != "" {
		rec := map[string]any{"argv": args}
		for _, k := range []string{worker.EnvFnArgsFile, worker.EnvFnMain, worker.EnvFnFunctionFile, worker.EnvCallerPython} {
			rec[k] = os.Getenv(k)
		}
		if b, err := os.ReadFile(os.Getenv(worker.EnvFnArgsFile)); err == nil {
			rec["args_file_bytes"] = len(b)
		}
		b, _ := json.Marshal(rec)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "tpurun: FAKE_ARGV: %v\n", err)
			return 70
		}
	}
	if msg := os.Getenv("FAKE_CONFIG_ERROR"); msg != "" {
		fmt.Fprintln(os.Stderr, "noise from the environment before the reason")
		fmt.Fprintf(os.Stderr, "tpurun: %s\nRun 'tpurun --help' for usage.\n", msg)
		return 2
	}
	nprocs, fn, fnArgs, framed := 1, "", "[]", false
	docOut, workersOut := os.Stdout, os.Stderr
	for i := 0; i < len(args); i++ {
		value := func() string {
			if i+1 >= len(args) {
				return ""
			}
			i++
			return args[i]
		}
		switch a := args[i]; a {
		case "--json", "--exit-with-parent", "--quiet":
		case "--json-frames":
			framed = true
		case "--nprocs":
			n, err := strconv.Atoi(value())
			if err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "tpurun: --nprocs %q: want a positive count\n", args[i])
				return 2
			}
			nprocs = n
		case "--fn":
			fn = value()
		case "--fn-args-json":
			fnArgs = value()
		case "--json-fd":
			fd, err := strconv.Atoi(value())
			if err != nil || fd < 3 {
				fmt.Fprintf(os.Stderr, "tpurun: --json-fd %q: want a descriptor from 3 up\n", args[i])
				return 2
			}
			docOut, workersOut = os.NewFile(uintptr(fd), "json-fd"), os.Stdout
			syscall.CloseOnExec(fd)
		default:
			fmt.Fprintf(os.Stderr, "tpurun: unknown flag: %s\n", a)
			return 2
		}
	}
	if fn == "" {
		fmt.Fprintln(os.Stderr, "tpurun: the fake CLI only runs --fn")
		return 2
	}
	term := make(chan os.Signal, 1)
	if os.Getenv("FAKE_IGNORE_TERM") != "" {
		signal.Ignore(syscall.SIGTERM)
	} else {
		signal.Notify(term, syscall.SIGTERM)
	}
	c := NewCollector(Options{Required: true, WorldSize: nprocs})
	exits := make([]RankExit, nprocs)
	pids := make([]int, 0, nprocs)
	var wg sync.WaitGroup
	for rank := 0; rank < nprocs; rank++ {
		r, w, err := os.Pipe()
		if err != nil {
			fmt.Fprintf(os.Stderr, "tpurun: %v\n", err)
			return 70
		}
		id, err := worker.ChannelID(w)
		if err != nil {
			fmt.Fprintf(os.Stderr, "tpurun: %v\n", err)
			return 70
		}
		cmd := exec.Command(cmp.Or(os.Getenv("PYTHON_EXEC"), os.Getenv(worker.EnvCallerPython)), "-u", "-m", "tpurun.fn", "--args-json", fnArgs, fn)
		cmd.Env = append(os.Environ(), worker.EnvResultFD+"=3", worker.EnvResultID+"="+id,
			worker.EnvReplicas+"="+strconv.Itoa(rank), "RANK="+strconv.Itoa(rank), "LOCAL_RANK="+strconv.Itoa(rank),
			"WORLD_SIZE="+strconv.Itoa(nprocs), "LOCAL_WORLD_SIZE="+strconv.Itoa(nprocs))
		cmd.ExtraFiles = []*os.File{w}
		cmd.Stdout, cmd.Stderr = workersOut, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "tpurun: start rank %d: %v\n", rank, err)
			return 70
		}
		w.Close()
		pid := cmd.Process.Pid
		pids = append(pids, pid)
		wg.Add(2)
		go func() {
			defer wg.Done()
			defer r.Close()
			_ = c.Consume(rank, pid, []int{rank}, r)
		}()
		go func() {
			defer wg.Done()
			_ = cmd.Wait()
			exits[rank] = RankExit{Rank: rank, PID: pid, ExitCode: cmd.ProcessState.ExitCode()}
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				exits[rank].ExitCode, exits[rank].Signal = 128+int(ws.Signal()), ws.Signal().String()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	stopped := false
	select {
	case <-done:
	case <-term:
		stopped = true
		for _, pid := range pids {
			_ = syscall.Kill(-pid, syscall.SIGTERM)
		}
		<-done
	}
	doc, _ := c.Finish(exits)
	encode := doc.Encode
	if framed {
		encode = doc.EncodeFramed
	}
	if err := encode(docOut); err != nil {
		fmt.Fprintf(os.Stderr, "tpurun: --json: %v\n", err)
		return 70
	}
	if stopped {
		return 128 + int(syscall.SIGTERM)
	}
	return doc.ExitCode
}
