package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"tpurun/worker"
)

// lineBody is the fixed body of every generated line, so a split or a merged line is visible in its length.
const lineBody = "the quick brown fox jumps over the lazy dog; the quick brown fox jumps over the lazy dog."

// runWorker is the benchmark's worker program, started by tpurun (or by a baseline) as `tpurun-bench worker MODE`.
//
//	lines BYTES              write about BYTES of numbered lines "<rank> <seq> <body>" to stdout
//	raw BYTES                write the payload of "result" to stdout instead (the plain-pipe baseline for results)
//	result BYTES             report a JSON string of BYTES for each owned replica through the result channel
//	teardown DIR N [ignore]  mark DIR/ready.<rank>; rank 0 waits for N marks, writes DIR/killed and SIGKILLs itself;
//	                         the others wait forever (with "ignore": ignoring SIGTERM)
func runWorker(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: tpurun-bench worker lines|raw|teardown ...")
		return 2
	}
	modes := map[string]func([]string) int{"lines": linesWorker, "raw": rawWorker, "result": resultWorker, "teardown": teardownWorker}
	if mode, ok := modes[args[0]]; ok {
		return mode(args[1:])
	}
	fmt.Fprintln(os.Stderr, "unknown worker mode", args[0])
	return 2
}

// linesWorker writes about BYTES of numbered lines "<rank> <seq> <body>" to stdout.
func linesWorker(args []string) int {
	rank := os.Getenv("RANK")
	n, _ := strconv.ParseInt(args[0], 10, 64)
	w := bufio.NewWriterSize(os.Stdout, 256<<10)
	var written int64
	for seq := 0; written < n; seq++ {
		k, _ := fmt.Fprintf(w, "%s %d %s\n", rank, seq, lineBody)
		written += int64(k)
	}
	if err := w.Flush(); err != nil {
		return 1
	}
	return 0
}

// rawWorker writes the payload of resultWorker to stdout in one call: the baseline differs from tpurun's result
// channel only in where the bytes go.
func rawWorker(args []string) int {
	n, _ := strconv.ParseInt(args[0], 10, 64)
	payload := bytes.Repeat([]byte("a"), int(n))
	if _, err := os.Stdout.Write(payload); err != nil {
		return 1
	}
	return 0
}

// resultWorker sends one JSON string of about BYTES per owned replica through the result channel.
func resultWorker(args []string) int {
	n, _ := strconv.ParseInt(args[0], 10, 64)
	c, err := worker.Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	payload := bytes.Repeat([]byte("a"), int(n))
	payload[0], payload[len(payload)-1] = '"', '"'
	for _, r := range c.Replicas() {
		if err := c.Send(worker.Frame{Kind: worker.KindResult, Encoding: worker.EncodingJSON, Replica: r, Payload: payload}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if err := c.Close(); err != nil {
		return 1
	}
	return 0
}

// teardownWorker marks DIR/ready.<rank>; rank 0 waits for N marks, writes DIR/killed and SIGKILLs itself; the
// others wait forever (with "ignore": ignoring SIGTERM).
func teardownWorker(args []string) int {
	rank := os.Getenv("RANK")
	dir := args[0]
	want, _ := strconv.Atoi(args[1])
	if len(args) > 2 && args[2] == "ignore" {
		signal.Ignore(syscall.SIGTERM)
	}
	if err := os.WriteFile(filepath.Join(dir, "ready."+rank), nil, 0o644); err != nil {
		return 1
	}
	if rank != "0" {
		for {
			time.Sleep(time.Hour) // wait to be stopped; a bare select{} trips Go's deadlock detector
		}
	}
	for {
		m, _ := filepath.Glob(filepath.Join(dir, "ready.*"))
		if len(m) >= want {
			break
		}
		time.Sleep(time.Millisecond)
	}
	stamp := strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := os.WriteFile(filepath.Join(dir, "killed"), []byte(stamp), 0o644); err != nil {
		return 1
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Hour)
	return 1
}
