package testutil

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// builtin is the verb table: every behaviour a fake worker of tpurun's tests can have. A package's tests
// Register the ones they use. N is the number after the colon.
var builtin = sync.OnceValue(func() map[string]Verb {
	m := map[string]Verb{}
	for _, v := range []Verb{
		// exit and fail
		{Name: "exit", Run: exitVerb},                                     // ready, print "rank R exits N", exit N
		{Name: "exitready", Run: exitReadyVerb},                           // the same once every rank is ready
		{Name: "early", Run: earlyVerb},                                   // exit N at once, before being ready (while the others start)
		{Name: "crash", Run: func(w *Worker) int { return w.N }},          // exit N, nothing else (no result)
		{Name: "raise", Run: raiseVerb},                                   // once every rank is ready, die by signal N
		{Name: "exitongo", Run: exitOnGoVerb},                             // ready; exit N once $FAKE_DIR/go exists
		{Name: "failuntil", Run: failUntilVerb},                           // exit 3 while TORCHELASTIC_RESTART_COUNT < N
		{Name: "hanguntil", Run: hangUntilVerb},                           // hang while TORCHELASTIC_RESTART_COUNT < N
		{Name: "record", Run: recordVerb},                                 // what PyTorch's @record writes, then exit N
		{Name: "fifoerr", Run: fifoErrVerb},                               // a FIFO at TORCHELASTIC_ERROR_FILE, exit N
		{Name: "linkerr", Run: linkErrVerb},                               // a symlink at TORCHELASTIC_ERROR_FILE, exit N
		{Name: "hang", Run: func(w *Worker) int { w.Ready(); select {} }}, // ready, block until killed
		{Name: "envdump", Run: envDumpVerb},                               // its whole env as JSON to N=DIR/<RANK>.json, exit 0
		// signals
		{Name: "ignore", Run: ignoreVerb}, // ignore signal N, ready, block
		{Name: "catch", Run: catchVerb},   // ready; on signal N print "rank R caught SIGNAME" and exit 0
		// descendants
		{Name: "child", Run: childVerb, Spawns: []string{"hang"}},       // a hanging grandchild in the group, exit N
		{Name: "childsetsid", Run: childVerb, Spawns: []string{"hang"}}, // the same in its own session
		{Name: "childclean", Run: childVerb, Spawns: []string{"hang"}},  // own session, no TPURUN_RUN_ID/SWEEP_TAG
		{Name: "grandkids", Run: grandkidsVerb, Spawns: []string{"grandkid"}},
		{Name: "grandkid", Run: grandkidVerb}, // (of grandkids) ignore TERM, INT, HUP
		{Name: "leavegroup", Run: leaveGroupVerb, Spawns: []string{"ignore"}},
		// output
		{Name: "lines", Run: linesVerb},       // N numbered lines and a partial one on stdout, exit 0
		{Name: "flood", Run: floodVerb},       // ready; N lines of 64 bytes on stdout at once, exit 0
		{Name: "errflood", Run: errFloodVerb}, // ignore SIGUSR1, ready, N lines to stderr, $FAKE_DIR/flooded-<rank>, block
		{Name: "long", Run: longVerb},         // once all are ready, N 10 000-byte lines to stdout and stderr
		{Name: "closeout", Run: closeOutVerb}, // close stdout, keep working, exit 0
		{Name: "env", Run: envVerb},           // write $FAKE_DIR/env-<rank>.json: the environment and argv
		// results (fd 3)
		{Name: "report", Run: reportVerb},                     // one good result per owned replica
		{Name: "reportcrash", Run: reportCrashVerb},           // report, then SIGKILL itself once all are ready
		{Name: "reporthang", Run: reportHangVerb},             // report, ready, block
		{Name: "reportfailfirst", Run: reportFailFirstVerb},   // report, then exit N in attempt 0
		{Name: "silent", Run: func(*Worker) int { return 0 }}, // report nothing, exit 0
		{Name: "twice", Run: twiceVerb},                       // report every owned replica twice
		{Name: "fail", Run: failVerb},                         // an error result per owned replica, exit N
		{Name: "big", Run: bigVerb},                           // an N-byte string per owned replica
		{Name: "seed0", Run: seed0Verb},                       // report replica 0 whatever it owns (xmp.spawn's seed)
		{Name: "foreign", Run: foreignVerb},                   // report, and replica 99 too
		{Name: "oversized", Run: oversizedVerb},               // an 8 KiB frame, then report
		{Name: "truncated", Run: truncatedVerb},               // report, then a frame cut short
		{Name: "cutframe", Run: cutFrameVerb},                 // a frame cut short instead of a result
		{Name: "garbage", Run: garbageVerb},                   // report, then 2 MB of bytes that are no frame
		{Name: "notaframe", Run: notAFrameVerb},               // one line of bytes that is no frame, instead of a result
		{Name: "version", Run: versionVerb},                   // a frame of an unknown protocol version
		{Name: "badjson", Run: badJSONVerb},                   // a frame whose JSON is malformed
		{Name: "result", Run: rawResultVerb},                  // raw bytes on fd 3
		{Name: "dupflood", Run: dupFloodVerb},                 // N results for its own replica
		{Name: "foreignflood", Run: foreignFloodVerb},         // N results for a replica it does not own
		{Name: "badthengood", Run: badThenGoodVerb},           // a cut JSON, an invalid UTF-8 one, then the good one
		{Name: "reportgrandchild", Run: reportGrandchildVerb, Spawns: []string{"hang"}},
	} {
		m[v.Name] = v
	}
	return m
})

// envDumpVerb writes the worker's whole environment as a JSON object to Arg/<RANK>.json (whole: through a
// temporary file beside it and a rename) and exits 0; 97 when it cannot.
func envDumpVerb(w *Worker) int {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	b, err := json.Marshal(env)
	if err == nil {
		tmp := filepath.Join(w.Arg, "."+w.Rank+".tmp")
		if err = os.WriteFile(tmp, b, 0o644); err == nil {
			err = os.Rename(tmp, filepath.Join(w.Arg, w.Rank+".json"))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "envdump:", err)
		return 97
	}
	return 0
}

func exitVerb(w *Worker) int {
	w.Ready()
	fmt.Printf("rank %s exits %d\n", w.Rank, w.N)
	return w.N
}

func exitReadyVerb(w *Worker) int {
	w.AllReady()
	fmt.Printf("rank %s exits %d\n", w.Rank, w.N)
	return w.N
}

func earlyVerb(w *Worker) int {
	fmt.Fprintf(os.Stderr, "rank %s gives up during start-up\n", w.Rank)
	return w.N
}

func raiseVerb(w *Worker) int {
	w.AllReady()
	sig := syscall.Signal(w.N)
	// The Go runtime catches SIGSEGV and the like: give the signal back its default action (terminate, core) as a
	// C program has it. SIGKILL has no action to reset.
	if sig != syscall.SIGKILL {
		var act [4]uintptr // struct kernel_sigaction: handler SIG_DFL (0), flags, restorer, mask
		if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); e != 0 {
			return fail(95, "rt_sigaction: %v", e)
		}
	}
	_ = syscall.Kill(os.Getpid(), sig)
	select {}
}

func exitOnGoVerb(w *Worker) int {
	w.Ready()
	waitFile(w.Path("go"))
	fmt.Fprintf(os.Stderr, "rank %s exits %d\n", w.Rank, w.N)
	return w.N
}

func restartCount() int {
	c, _ := strconv.Atoi(os.Getenv("TORCHELASTIC_RESTART_COUNT"))
	return c
}

func failUntilVerb(w *Worker) int {
	if restartCount() < w.N {
		return 3
	}
	return 0
}

func hangUntilVerb(w *Worker) int {
	w.Ready()
	if c := restartCount(); c >= w.N {
		fmt.Printf("rank %s of %s exits 0 in generation %d\n", w.Rank, os.Getenv("WORLD_SIZE"), c)
		return 0
	}
	select {}
}

func recordVerb(w *Worker) int {
	w.AllReady()
	fmt.Fprintln(os.Stderr, "Traceback (most recent call last):")
	fmt.Fprintln(os.Stderr, "ValueError: bad learning rate")
	rec := fmt.Sprintf(`{"message": {"message": "ValueError: bad learning rate", "extraInfo": {"py_callstack": %q, "timestamp": "1"}}}`,
		"Traceback (most recent call last):\n  File \"train.py\", line 3, in main\nValueError: bad learning rate\n")
	_ = os.WriteFile(os.Getenv("TORCHELASTIC_ERROR_FILE"), []byte(rec), 0o644)
	return w.N
}

func fifoErrVerb(w *Worker) int {
	path := os.Getenv("TORCHELASTIC_ERROR_FILE")
	_ = os.Remove(path)
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		return fail(92, "mkfifo: %v", err)
	}
	return w.N
}

func linkErrVerb(w *Worker) int {
	path := os.Getenv("TORCHELASTIC_ERROR_FILE")
	target := w.Path("elsewhere.json")
	_ = os.WriteFile(target, []byte(`{"message": "read through a symlink"}`), 0o644)
	_ = os.Remove(path)
	if err := os.Symlink(target, path); err != nil {
		return fail(92, "symlink: %v", err)
	}
	return w.N
}

func ignoreVerb(w *Worker) int {
	signal.Ignore(syscall.Signal(w.N))
	w.Ready()
	select {}
}

func catchVerb(w *Worker) int {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.Signal(w.N))
	w.Ready()
	s := <-c
	fmt.Printf("rank %s caught %s\n", w.Rank, unix.SignalName(s.(syscall.Signal)))
	return 0
}

// childVerb starts a hanging grandchild (child: in the worker's group; childsetsid: in a session of its own;
// childclean: that, without TPURUN_RUN_ID and TPURUN_SWEEP_TAG), handing it stdout, stderr and fd 3; waits until
// it recorded its pid, marks ready and exits N.
func childVerb(w *Worker) int {
	var c = w.Child("hang")
	if w.Verb == "childclean" {
		c = w.Child("hang", "TPURUN_RUN_ID=", "TPURUN_SWEEP_TAG=")
	}
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	c.ExtraFiles = []*os.File{os.NewFile(3, "result")}
	if w.Verb != "child" {
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	if err := c.Start(); err != nil {
		return fail(99, "start grandchild: %v", err)
	}
	waitFile(w.Path("pids", strconv.Itoa(c.Process.Pid)))
	w.Ready()
	return w.N
}

// grandkidsVerb starts two grandchildren that ignore SIGTERM (the second in its own session), waits until both
// recorded their pid under $FAKE_DIR/gc, then once every rank is ready exits N.
func grandkidsVerb(w *Worker) int {
	for i, setsid := range []bool{false, true} {
		c := w.Child("grandkid:" + strconv.Itoa(i))
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
		if err := c.Start(); err != nil {
			return fail(94, "start grandchild: %v", err)
		}
	}
	waitFile(w.Path("gc", w.Rank+"-0"))
	waitFile(w.Path("gc", w.Rank+"-1"))
	w.AllReady()
	return w.N
}

func grandkidVerb(w *Worker) int {
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	_ = w.WriteWhole(w.Path("gc", w.Rank+"-"+w.Arg), []byte(strconv.Itoa(os.Getpid())))
	select {}
}

// leaveGroupVerb leaves its process group for a helper's new one (the helper ignores SIGTERM too), records
// $FAKE_DIR/gc/<rank>, marks ready and hangs ignoring SIGTERM, SIGINT and SIGHUP.
func leaveGroupVerb(w *Worker) int {
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	c := w.Child("ignore:15")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		return fail(92, "start helper: %v", err)
	}
	if err := syscall.Setpgid(0, c.Process.Pid); err != nil {
		return fail(92, "setpgid: %v", err)
	}
	_ = os.WriteFile(w.Path("gc", w.Rank), nil, 0o644)
	w.Ready()
	select {}
}

func linesVerb(w *Worker) int {
	b := bufio.NewWriterSize(os.Stdout, 4096)
	for i := 0; i < w.N; i++ {
		fmt.Fprintf(b, "rank %s line %d %s\n", w.Rank, i, strings.Repeat("x", i%50))
	}
	fmt.Fprintf(b, "rank %s partial", w.Rank)
	_ = b.Flush()
	return 0
}

func floodVerb(w *Worker) int {
	w.Ready()
	line := []byte(strings.Repeat("x", 50) + " rank " + w.Rank + " flood\n")
	batch := bytes.Repeat(line, 16384) // 1 MiB writes: as fast as it gets, without holding the whole flood
	for left := w.N; left > 0; left -= 16384 {
		if _, err := os.Stdout.Write(batch[:min(left, 16384)*len(line)]); err != nil {
			return fail(1, "flood: %v", err)
		}
	}
	fmt.Printf("rank %s flood done\n", w.Rank)
	return 0
}

func errFloodVerb(w *Worker) int {
	signal.Ignore(syscall.SIGUSR1)
	w.Ready()
	for i := range w.N {
		fmt.Fprintf(os.Stderr, "rank %s err %d %s\n", w.Rank, i, strings.Repeat("e", 100))
	}
	if w.Dir != "" {
		_ = os.WriteFile(w.Path("flooded-"+w.Rank), nil, 0o644)
	}
	select {}
}

func longVerb(w *Worker) int {
	w.AllReady()
	body := strings.Repeat("a", 10_000)
	for i := range w.N {
		fmt.Printf("rank %s out %d %s\n", w.Rank, i, body)
		fmt.Fprintf(os.Stderr, "rank %s err %d %s\n", w.Rank, i, body)
	}
	return 0
}

func closeOutVerb(w *Worker) int {
	fmt.Printf("rank %s closes stdout\n", w.Rank)
	_ = os.Stdout.Close()
	w.AllReady()
	fmt.Fprintf(os.Stderr, "rank %s still alive after closing stdout\n", w.Rank)
	return 0
}

func envVerb(w *Worker) int {
	b, _ := json.Marshal(map[string]any{"env": os.Environ(), "args": os.Args[1:]})
	_ = os.WriteFile(w.Path("env-"+w.Rank+".json"), b, 0o644)
	return 0
}
