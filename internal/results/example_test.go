package results_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"tpurun/internal/results"
	"tpurun/worker"
)

// channel is what a worker owning replicas writes with report: here a buffer; under a launcher, the read end of
// the worker's result pipe.
func channel(replicas []int, report func(c *worker.Client)) *bytes.Buffer {
	var b bytes.Buffer
	report(worker.NewClient(&b, replicas))
	return &b
}

// A launcher calls Consume once per worker (each in its own goroutine, on the read end of the worker's result
// pipe) and, once every worker has exited, Finish with how each rank ended: the document of the run, and its
// violations of the contract.
func ExampleCollector() {
	c := results.NewCollector(results.Options{Required: true, RunID: "demo"})
	_ = c.Consume(0, 100, []int{0}, channel([]int{0}, func(w *worker.Client) { _ = w.Report(0, "first") }))
	_ = c.Consume(1, 101, []int{1, 2}, channel([]int{1, 2}, func(w *worker.Client) {
		_ = w.Report(1, "second")
		_ = w.Fail(2, errors.New("loss is NaN"))
	}))
	doc, err := c.Finish([]results.RankExit{{Rank: 1, PID: 101}, {Rank: 0, PID: 100}})
	fmt.Println("exit code", doc.ExitCode, "ok", doc.OK, "violations", err)
	for _, r := range doc.Results {
		if r.Error != nil {
			fmt.Printf("replica %d (rank %d): %s %s\n", r.Replica, r.Rank, r.Error.Type, r.Error.Message)
			continue
		}
		fmt.Printf("replica %d (rank %d): %s\n", r.Replica, r.Rank, r.Value)
	}
	// Output:
	// exit code 1 ok false violations <nil>
	// replica 0 (rank 0): "first"
	// replica 1 (rank 1): "second"
	// replica 2 (rank 1): *errors.errorString loss is NaN
}

// Finish names every violation of the contract: here a replica reported twice, and one never reported by a
// worker that exited 0 (results are required). The run exits 65.
func ExampleCollector_Finish() {
	c := results.NewCollector(results.Options{Required: true})
	_ = c.Consume(0, 100, []int{0, 1}, channel([]int{0, 1}, func(w *worker.Client) {
		_ = w.Report(0, 1.5)
		_ = w.Report(0, 2.5)
	}))
	doc, err := c.Finish([]results.RankExit{{Rank: 0, PID: 100}})
	fmt.Println("exit code", doc.ExitCode, errors.Is(err, results.ErrDuplicateResult), errors.Is(err, results.ErrMissingResult))
	for _, v := range doc.Violations {
		fmt.Printf("%s: %s\n", v.Kind, v.Message)
	}
	// Output:
	// exit code 65 true true
	// duplicate_result: 2 results for replica 0: rank 0 pid 100 and rank 0 pid 100; the first was kept
	// missing_result: rank 0 pid 100 exited 0 without reporting a result for replica 1 (results are required)
}

// Multi-host: each node shares what its collector saw (Share, JSON on the wire), and node 0 merges them with Add,
// so that exactly-once holds world-wide: here both nodes' workers reported replica 0.
func ExampleCollector_Add() {
	node1 := results.NewCollector(results.Options{NodeRank: 1})
	_ = node1.Consume(1, 201, []int{0}, channel([]int{0}, func(w *worker.Client) { _ = w.Report(0, "from node 1") }))
	wire, _ := json.Marshal(node1.Share())

	node0 := results.NewCollector(results.Options{Nodes: 2})
	_ = node0.Consume(0, 100, []int{0}, channel([]int{0}, func(w *worker.Client) { _ = w.Report(0, "from node 0") }))
	var share results.Share
	_ = json.Unmarshal(wire, &share)
	err := node0.Add(1, &share)
	fmt.Println(errors.Is(err, results.ErrDuplicateResult))
	doc, _ := node0.Finish([]results.RankExit{{Rank: 0, PID: 100}, {Rank: 1, PID: 201}})
	fmt.Println(doc.Violations[0].Message)
	fmt.Println("exit code", doc.ExitCode, "kept", string(doc.Results[0].Value))
	// Output:
	// true
	// 2 results for replica 0: rank 0 pid 100 (node 0) and rank 1 pid 201 (node 1); the first was kept
	// exit code 65 kept "from node 0"
}

// Decide is the order of a run's exit code: what failed the run wins, then a violated contract, then a replica's
// error. Finish decides with the first failed exit; a launcher that knows better what failed (a timeout, a
// signal) decides again.
func ExampleDocument_Decide() {
	c := results.NewCollector(results.Options{})
	_ = c.Consume(0, 100, []int{0}, channel([]int{0}, func(w *worker.Client) { _ = w.Fail(0, errors.New("oops")) }))
	doc, _ := c.Finish([]results.RankExit{{Rank: 0, PID: 100}})
	fmt.Println(doc.ExitCode, len(doc.ReplicaErrors()))
	fmt.Println(doc.Decide(124), doc.OK) // the run timed out
	// Output:
	// 1 1
	// 124 false
}

// WriteFile writes the document atomically, as --results does.
func ExampleWriteFile() {
	dir, err := os.MkdirTemp("", "results-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	c := results.NewCollector(results.Options{RunID: "demo"})
	_ = c.Consume(0, 100, []int{0}, channel([]int{0}, func(w *worker.Client) { _ = w.Report(0, 42) }))
	doc, _ := c.Finish([]results.RankExit{{Rank: 0, PID: 100}})
	path := filepath.Join(dir, "results.json")
	fmt.Println(results.WriteFile(path, doc))
	b, _ := os.ReadFile(path)
	fmt.Print(string(b))
	// Output:
	// <nil>
	// {
	//   "run_id": "demo",
	//   "world": {
	//     "size": 1,
	//     "nodes": 1
	//   },
	//   "results": [
	//     {
	//       "replica": 0,
	//       "rank": 0,
	//       "pid": 100,
	//       "node": 0,
	//       "ok": true,
	//       "encoding": "json",
	//       "value": 42
	//     }
	//   ],
	//   "ranks": [
	//     {
	//       "rank": 0,
	//       "pid": 100,
	//       "exit_code": 0,
	//       "ok": true
	//     }
	//   ],
	//   "violations": [],
	//   "ok": true,
	//   "exit_code": 0
	// }
}
