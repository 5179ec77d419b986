package testutil

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"tpurun/worker"
)

// The result verbs speak the worker's side of the result contract (fd 3, package worker), as a user's Go program
// would or as a broken or hostile one would.

// Value is the result the result verbs report for replica r of rank: {"replica", "rank", "sq", "lang"}.
func Value(r, rank int) map[string]any {
	return map[string]any{"replica": r, "rank": rank, "sq": r * r, "lang": "go"}
}

func rank() int {
	r, _ := strconv.Atoi(os.Getenv("RANK"))
	return r
}

// reportOwn reports Value for every replica this worker owns, through the checking client.
func reportOwn() error {
	reps, err := worker.Replicas()
	if err != nil {
		return err
	}
	for _, r := range reps {
		if err := worker.Report(r, Value(r, rank())); err != nil {
			return err
		}
	}
	return nil
}

// raw is the result channel without the client's checks, as a buggy or foreign writer would write it.
func raw() *os.File { return os.NewFile(3, "raw") }

// appendFrame appends one JSON frame, written as is (no client-side checks: what a broken worker sends).
func appendFrame(b []byte, k worker.Kind, replica int, payload []byte) []byte {
	b = worker.AppendHeader(b, k, worker.EncodingJSON, replica, len(payload))
	return append(b, payload...)
}

// writeFrames writes n frames made by add straight to the result channel, in large writes.
func writeFrames(n int, add func(b []byte, i int) []byte) int {
	ch := raw()
	var b []byte
	for i := range n {
		b = add(b, i)
		if len(b) >= 1<<20 || i == n-1 {
			if _, err := ch.Write(b); err != nil {
				return fail(91, "write frames: %v", err)
			}
			b = b[:0]
		}
	}
	return 0
}

// firstReplica is the first replica this worker owns (TPURUN_REPLICAS "1" or "2,3").
func firstReplica() int {
	first, _, _ := strings.Cut(os.Getenv(worker.EnvReplicas), ",")
	n, _ := strconv.Atoi(first)
	return n
}

func reported(code int) int {
	if err := reportOwn(); err != nil {
		return fail(96, "report: %v", err)
	}
	return code
}

func reportVerb(*Worker) int { return reported(0) }

func reportCrashVerb(w *Worker) int {
	if code := reported(0); code != 0 {
		return code
	}
	w.AllReady()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

func reportHangVerb(w *Worker) int {
	if code := reported(0); code != 0 {
		return code
	}
	w.Ready()
	select {}
}

func reportFailFirstVerb(w *Worker) int {
	if code := reported(0); code != 0 || restartCount() > 0 {
		return code
	}
	return w.N
}

func twiceVerb(*Worker) int {
	if code := reported(0); code != 0 {
		return code
	}
	return reported(0)
}

func failVerb(w *Worker) int {
	reps, err := worker.Replicas()
	if err != nil {
		return fail(96, "%v", err)
	}
	for _, r := range reps {
		if err := worker.Fail(r, fmt.Errorf("rank %d: loss is NaN", rank())); err != nil {
			return fail(96, "fail: %v", err)
		}
	}
	return w.N
}

func bigVerb(w *Worker) int {
	reps, err := worker.Replicas()
	if err != nil {
		return fail(96, "%v", err)
	}
	for _, r := range reps {
		if err := worker.Report(r, strings.Repeat(strconv.Itoa(rank()%10), w.N)); err != nil {
			return fail(96, "report: %v", err)
		}
	}
	return 0
}

func seed0Verb(*Worker) int {
	if err := worker.NewClient(raw(), nil).Report(0, Value(0, rank())); err != nil {
		return fail(96, "report: %v", err)
	}
	return 0
}

func foreignVerb(*Worker) int {
	if code := reported(0); code != 0 {
		return code
	}
	if err := worker.NewClient(raw(), nil).Report(99, "not mine"); err != nil {
		return fail(96, "report: %v", err)
	}
	return 0
}

func oversizedVerb(*Worker) int {
	if err := worker.NewClient(raw(), nil).Report(rank(), strings.Repeat("x", 8192)); err != nil {
		return fail(96, "report: %v", err)
	}
	return reported(0)
}

func truncatedVerb(*Worker) int {
	if code := reported(0); code != 0 {
		return code
	}
	hdr := worker.AppendHeader(nil, worker.KindResult, worker.EncodingJSON, rank(), 100)
	_, _ = raw().Write(append(hdr, `"only part`...))
	return 0
}

func cutFrameVerb(*Worker) int {
	h := worker.AppendHeader(nil, worker.KindResult, worker.EncodingJSON, firstReplica(), 100)
	if _, err := raw().Write(append(h, "[1,2,3,4]"...)); err != nil {
		return fail(96, "write: %v", err)
	}
	return 0
}

func garbageVerb(*Worker) int {
	if code := reported(0); code != 0 {
		return code
	}
	// More garbage than a pipe holds: the collector must drain it or this worker blocks forever.
	_, _ = raw().Write(bytes.Repeat([]byte("Traceback (most recent call last): garbage\n"), 50000))
	return 0
}

func notAFrameVerb(*Worker) int {
	if _, err := raw().Write([]byte("this is not a tpurun frame, just bytes on fd 3\n")); err != nil {
		return fail(96, "write: %v", err)
	}
	return 0
}

func versionVerb(*Worker) int {
	hdr := worker.AppendHeader(nil, worker.KindResult, worker.EncodingJSON, rank(), 2)
	hdr[4] = 9
	_, _ = raw().Write(append(hdr, "{}"...))
	return 0
}

func badJSONVerb(*Worker) int {
	if _, err := raw().Write(appendFrame(nil, worker.KindResult, rank(), []byte("{nope"))); err != nil {
		return fail(96, "write: %v", err)
	}
	return 0
}

func rawResultVerb(w *Worker) int {
	fmt.Fprintf(raw(), "result of rank %s replicas %s", w.Rank, os.Getenv(worker.EnvReplicas))
	return 0
}

func dupFloodVerb(w *Worker) int {
	r := firstReplica()
	return writeFrames(w.N, func(b []byte, i int) []byte {
		return appendFrame(b, worker.KindResult, r, []byte(strconv.Itoa(i)))
	})
}

func foreignFloodVerb(w *Worker) int {
	return writeFrames(w.N, func(b []byte, i int) []byte {
		return appendFrame(b, worker.KindResult, 999_999, []byte(strconv.Itoa(i)))
	})
}

func badThenGoodVerb(w *Worker) int {
	r := firstReplica()
	return writeFrames(1, func(b []byte, _ int) []byte {
		b = appendFrame(b, worker.KindResult, r, []byte(`{"cut": `))
		b = appendFrame(b, worker.KindResult, r, []byte("\"caf\xe9\""))
		return appendFrame(b, worker.KindResult, r, []byte(`{"rank": "`+w.Rank+`"}`))
	})
}

// reportGrandchildVerb opens its channel (close-on-exec from then on), reports "before the grandchild", starts a
// hanging grandchild and prints its pid.
func reportGrandchildVerb(w *Worker) int {
	reps, err := worker.Replicas()
	if err != nil {
		return fail(96, "%v", err)
	}
	if err := worker.Report(reps[0], "before the grandchild"); err != nil {
		return fail(96, "report: %v", err)
	}
	gc := w.Child("hang")
	if err := gc.Start(); err != nil {
		return fail(96, "start grandchild: %v", err)
	}
	fmt.Println(gc.Process.Pid)
	return 0
}
