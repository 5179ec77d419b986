package worker_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"tpurun/worker"
)

// A worker reports one result per replica it owns. Under tpurun, worker.Report writes to the result channel
// tpurun opened for this process; outside tpurun there is none, and Report says so instead of writing into
// whatever descriptor 3 happens to be.
func ExampleReport() {
	err := worker.Report(0, map[string]float64{"loss": 0.25})
	fmt.Println(errors.Is(err, worker.ErrNoChannel))

	// What tpurun reads is one frame per call: here a client on a buffer, decoded the way the launcher does.
	var channel bytes.Buffer
	c := worker.NewClient(&channel, []int{0, 1})
	_ = c.Report(0, map[string]float64{"loss": 0.25})
	_ = c.Fail(1, errors.New("out of memory"))
	fmt.Println(c.Report(7, "x") != nil) // replica 7 is not this worker's
	d := worker.NewDecoder(&channel, 1<<20, 4096)
	for {
		f, err := d.Next()
		if err != nil {
			break
		}
		if f.Kind == worker.KindError { // a JSON ErrorInfo: type, message and the reporting goroutine's stack
			var info worker.ErrorInfo
			_ = json.Unmarshal(f.Payload, &info)
			fmt.Printf("%s replica %d: %s %q\n", f.Kind, f.Replica, info.Type, info.Message)
			continue
		}
		fmt.Printf("%s replica %d: %s\n", f.Kind, f.Replica, f.Payload)
	}
	// Output:
	// true
	// true
	// result replica 0: {"loss":0.25}
	// error replica 1: *errors.errorString "out of memory"
}

// envExampleWorker makes the test binary play the worker program of an example (goWorker or clientWorker) instead
// of running the tests.
const envExampleWorker = "TPURUN_EXAMPLE_WORKER"

func init() {
	switch os.Getenv(envExampleWorker) {
	case "package":
		os.Exit(goWorker())
	case "client":
		os.Exit(clientWorker())
	}
}

// goWorker is a Go worker's whole part in the contract: a result (or an error) for every replica it owns, through
// the package's functions, which open the channel tpurun handed the process on first use.
func goWorker() int {
	replicas, err := worker.Replicas()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, r := range replicas {
		if r == 1 {
			err = worker.Fail(r, errors.New("loss is NaN"))
		} else {
			err = worker.Report(r, map[string]any{"replica": r, "loss": 0.25})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// clientWorker does the same with a Client of its own: Open checks the channel once, and a replica the worker does
// not own is refused before anything is written.
func clientWorker() int {
	c, err := worker.Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	if err := c.Report(7, "not mine"); !errors.Is(err, worker.ErrForeignReplica) {
		fmt.Fprintln(os.Stderr, "replica 7 was not refused:", err)
		return 1
	}
	for _, r := range c.Replicas() {
		if err := c.Report(r, json.RawMessage(`[1,2,3]`)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// runWorker plays tpurun for one worker: it starts the test binary as the worker program named by mode, owning
// replicas, with its result channel on descriptor 3, prints every frame the worker sends, as tpurun's collector
// reads them, and then how the worker ended.
func runWorker(mode, replicas string) {
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	id, err := worker.ChannelID(w) // lets the worker tell its channel from another file at descriptor 3
	if err != nil {
		fmt.Println(err)
		return
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envExampleWorker+"="+mode,
		worker.EnvResultFD+"=3", worker.EnvResultID+"="+id, worker.EnvReplicas+"="+replicas)
	cmd.ExtraFiles = []*os.File{w} // descriptor 3 of the worker
	cmd.Stderr = os.Stderr
	err = cmd.Start()
	w.Close() // the worker holds the write end now: EOF when it exits
	if err != nil {
		fmt.Println(err)
		return
	}
	d := worker.NewDecoder(r, worker.DefaultMaxPayload, 0)
	for {
		f, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Println(err)
			break
		}
		if f.Kind == worker.KindError {
			var info worker.ErrorInfo // type, message and the traceback (a stack) of the reporting goroutine
			_ = json.Unmarshal(f.Payload, &info)
			fmt.Printf("%s for replica %d: %s %q\n", f.Kind, f.Replica, info.Type, info.Message)
			continue
		}
		fmt.Printf("%s for replica %d: %s\n", f.Kind, f.Replica, f.Payload)
	}
	fmt.Println("worker exited:", cmd.Wait())
}

// A Go worker started by tpurun finds its result channel in TPURUN_RESULT_FD (and TPURUN_RESULT_ID) and the
// replicas it owns in TPURUN_REPLICAS; Replicas, Report and Fail use them. Here the example plays tpurun: it starts
// goWorker as a worker owning replicas 0 and 1, and reads its channel.
func Example() {
	runWorker("package", "0,1")
	// Output:
	// result for replica 0: {"loss":0.25,"replica":0}
	// error for replica 1: *errors.errorString "loss is NaN"
	// worker exited: <nil>
}

// Open returns the client of the process's channel, for a worker that wants to handle its errors at the start or
// close the channel itself (clientWorker); here owning replicas 2 and 3.
func ExampleOpen() {
	runWorker("client", "2,3")
	// Output:
	// result for replica 2: [1,2,3]
	// result for replica 3: [1,2,3]
	// worker exited: <nil>
}

// ParseReplicas reads TPURUN_REPLICAS; FormatReplicas writes it.
func ExampleParseReplicas() {
	rs, err := worker.ParseReplicas("4,5")
	fmt.Println(rs, err, worker.FormatReplicas(rs))
	_, err = worker.ParseReplicas("0,0")
	fmt.Println(errors.Is(err, worker.ErrBadEnv), err)
	// Output:
	// [4 5] <nil> 4,5
	// true bad tpurun environment: TPURUN_REPLICAS="0,0": replica 0 is listed twice
}

// CheckJSON is the check the collector makes of every JSON result: valid JSON in UTF-8 that Python's json reads
// back.
func ExampleCheckJSON() {
	fmt.Println(worker.CheckJSON([]byte(`{"loss": 0.25}`)))
	err := worker.CheckJSON([]byte(`[` + strings.Repeat("9", 5000) + `]`))
	fmt.Println(errors.Is(err, worker.ErrHugeInteger), err)
	fmt.Println(worker.CheckJSON([]byte(`{"loss": }`)))
	// Output:
	// <nil>
	// true an integer of 5000 digits at byte 1, where Python's json reads at most 4300
	// not valid JSON in UTF-8
}

// Every frame is a 16-byte header (magic, version, kind, encoding, reserved, replica, length) and its payload:
// what a client in another language must write (PROTOCOL.md).
func ExampleEncode() {
	b, err := worker.Encode(worker.Frame{Kind: worker.KindResult, Encoding: worker.EncodingJSON, Replica: 2,
		Payload: []byte(`0.25`)})
	fmt.Printf("% x | %s %v\n", b[:worker.HeaderSize], b[worker.HeaderSize:], err)
	// Output: 54 50 52 46 01 01 01 00 00 00 00 02 00 00 00 04 | 0.25 <nil>
}
