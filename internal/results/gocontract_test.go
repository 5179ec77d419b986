package results

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"tpurun/internal/testutil"

	"tpurun/internal/failure"
	"tpurun/worker"
)

func TestGoWorkersAllReport(t *testing.T) {
	c := NewCollector(Options{Required: true, RunID: "r1", WorldSize: 4})
	specs := []spec{{[]int{0}, goCmd(t, "report")}, {[]int{1}, goCmd(t, "report")}, {[]int{2, 3}, goCmd(t, "report")}}
	runs := runWorld(t, c, specs)
	for _, r := range runs {
		if r.consume != nil || r.exit.ExitCode != 0 {
			t.Fatalf("rank %d: exit %d, consume %v", r.exit.Rank, r.exit.ExitCode, r.consume)
		}
	}
	doc, err := c.Finish(exitsOf(runs))
	if err != nil {
		t.Fatal(err)
	}
	if !doc.OK || doc.ExitCode != 0 || len(doc.Results) != 4 || doc.RunID != "r1" || doc.World.Size != 4 {
		t.Fatalf("document: %+v", doc)
	}
	for i, res := range doc.Results {
		rank := i
		if i == 3 {
			rank = 2
		}
		var v struct {
			Replica, Rank int
			Lang          string
		}
		if err := json.Unmarshal(res.Value, &v); err != nil || res.Replica != i || v.Replica != i || v.Rank != rank ||
			res.Rank != rank || res.PID != runs[rank].exit.PID || !res.OK || res.Encoding != "json" {
			t.Fatalf("result %d: %+v (%s), %v", i, res, res.Value, err)
		}
	}
}

// TestSeedScenario reproduces xmp.spawn's "4 results for replica 0": several processes that all own replica 0
// (SPMD with several processes, or a device initialized before spawning) all report it.
func TestSeedScenario(t *testing.T) {
	c := NewCollector(Options{Required: true})
	var specs []spec
	for i := 0; i < 4; i++ {
		specs = append(specs, spec{[]int{0}, goCmd(t, "report")})
	}
	runs := runWorld(t, c, specs)
	doc, err := c.Finish(exitsOf(runs))
	ce := only(t, err, ErrDuplicateResult)
	if !strings.HasPrefix(ce.Message, "4 results for replica 0: rank ") || ce.Replica != 0 || ce.OtherPID <= 0 ||
		ce.Rank == ce.OtherRank || !strings.Contains(ce.Hint, "SPMD") || !strings.Contains(ce.Hint, "before spawning") {
		t.Fatalf("duplicate: %+v", ce)
	}
	for _, r := range runs {
		if !strings.Contains(ce.Message, fmt.Sprintf("rank %d pid %d", r.exit.Rank, r.exit.PID)) {
			t.Fatalf("%q does not name rank %d pid %d", ce.Message, r.exit.Rank, r.exit.PID)
		}
	}
	if doc.OK || doc.ExitCode != failure.ExitResults || len(doc.Results) != 1 || len(doc.Violations) != 1 ||
		doc.Violations[0].Kind != "duplicate_result" {
		t.Fatalf("document: %+v", doc)
	}
}

func TestDuplicateMessageTwoRanks(t *testing.T) {
	c := NewCollector(Options{})
	runs := runWorld(t, c, []spec{{[]int{0}, goCmd(t, "report")}, {[]int{0}, goCmd(t, "report")}})
	_, err := c.Finish(exitsOf(runs))
	ce := only(t, err, ErrDuplicateResult)
	a, b := runs[ce.Rank].exit, runs[ce.OtherRank].exit
	want := fmt.Sprintf("2 results for replica 0: rank %d pid %d and rank %d pid %d", a.Rank, a.PID, b.Rank, b.PID)
	if !strings.HasPrefix(ce.Message, want) || ce.PID != a.PID || ce.OtherPID != b.PID {
		t.Fatalf("got %q, want prefix %q", ce.Message, want)
	}
}

func TestSameRankTwice(t *testing.T) {
	c := NewCollector(Options{})
	runs := runWorld(t, c, []spec{{[]int{0}, goCmd(t, "twice")}})
	_, err := c.Finish(exitsOf(runs))
	ce := only(t, err, ErrDuplicateResult)
	if ce.Hint != hintDuplicateSelf {
		t.Fatalf("hint for one rank reporting twice: %q", ce.Hint)
	}
}

// TestViolations runs one faulty worker next to healthy ones for every kind of violation: each is its named error,
// the healthy results are all in the document, and the exit code is the documented one.
func TestViolations(t *testing.T) {
	cases := []struct {
		mode     string
		kind     error
		name     string
		keptOwn  bool // the faulty worker's own valid result is kept too
		required bool
	}{
		{"foreign", ErrForeignReplica, "foreign_replica", true, true},
		{"silent", ErrMissingResult, "missing_result", false, true},
		{"oversized", ErrOversizedFrame, "oversized_frame", true, true},
		{"truncated", ErrTruncatedFrame, "truncated_frame", true, true},
		{"garbage", ErrMalformedFrame, "malformed_frame", true, true},
		{"version", ErrUnknownVersion, "unknown_version", false, false},
		{"badjson", ErrMalformedFrame, "malformed_frame", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			c := NewCollector(Options{Required: tc.required, MaxFrameBytes: 4096})
			runs := runWorld(t, c, []spec{{[]int{0}, goCmd(t, "report")}, {[]int{1}, goCmd(t, tc.mode)},
				{[]int{2}, goCmd(t, "report")}})
			if runs[0].consume != nil || runs[2].consume != nil {
				t.Fatalf("healthy ranks: %v, %v", runs[0].consume, runs[2].consume)
			}
			if tc.kind != ErrMissingResult {
				ce := only(t, runs[1].consume, tc.kind)
				if ce.Rank != 1 || ce.PID != runs[1].exit.PID {
					t.Fatalf("Consume's violation names rank %d pid %d, want rank 1 pid %d", ce.Rank, ce.PID, runs[1].exit.PID)
				}
			}
			doc, err := c.Finish(exitsOf(runs))
			ce := only(t, err, tc.kind)
			var as *ContractError
			if !errors.As(err, &as) || ce.Rank != 1 || ce.PID != runs[1].exit.PID || ce.Hint == "" ||
				!strings.Contains(ce.Message, "rank 1 pid "+strconv.Itoa(runs[1].exit.PID)) {
				t.Fatalf("violation: %+v", ce)
			}
			if doc.OK || doc.ExitCode != failure.ExitResults || len(doc.Violations) != 1 || doc.Violations[0].Kind != tc.name {
				t.Fatalf("document: ok=%v exit=%d violations=%+v", doc.OK, doc.ExitCode, doc.Violations)
			}
			want := map[int]bool{0: true, 2: true}
			if tc.keptOwn {
				want[1] = true
			}
			if len(doc.Results) != len(want) {
				t.Fatalf("results %+v, want replicas %v", doc.Results, want)
			}
			for _, r := range doc.Results {
				if !want[r.Replica] || !r.OK {
					t.Fatalf("unexpected result %+v", r)
				}
			}
			t.Logf("%s: %v", tc.mode, err)
		})
	}
}

func TestMissingOnlyWhenRequired(t *testing.T) {
	c := NewCollector(Options{Required: false})
	runs := runWorld(t, c, []spec{{[]int{0}, goCmd(t, "silent")}})
	doc, err := c.Finish(exitsOf(runs))
	if err != nil || !doc.OK || doc.ExitCode != 0 {
		t.Fatalf("plain-program mode must accept a silent worker: %v %+v", err, doc)
	}
}

func TestWorkerFailureWins(t *testing.T) {
	c := NewCollector(Options{Required: true})
	runs := runWorld(t, c, []spec{{[]int{0}, goCmd(t, "report")}, {[]int{1}, goCmd(t, "fail:1")}, {[]int{2}, goCmd(t, "crash:13")}})
	doc, err := c.Finish([]RankExit{runs[2].exit, runs[1].exit, runs[0].exit})
	if err != nil {
		t.Fatalf("a failed worker is not a contract violation: %v", err)
	}
	if doc.OK || doc.ExitCode != 13 {
		t.Fatalf("exit code %d, want 13 (the first failure in exit order)", doc.ExitCode)
	}
	r := doc.Results[1]
	if r.OK || r.Error == nil || r.Error.Type != "*errors.errorString" || r.Error.Message != "rank 1: loss is NaN" || r.Rank != 1 {
		t.Fatalf("error result: %+v", r)
	}
	if len(doc.Ranks) != 3 || doc.Ranks[2].ExitCode != 13 || doc.Ranks[2].OK || !doc.Ranks[0].OK {
		t.Fatalf("ranks: %+v", doc.Ranks)
	}
}

// TestGoGrandchildDoesNotInheritChannel: a Go worker that opened its channel starts a grandchild; the grandchild
// must not hold the channel (else the launcher would wait for it to see EOF).
func TestGoGrandchildDoesNotInheritChannel(t *testing.T) {
	c := NewCollector(Options{Required: true})
	run := launch(t, c, 0, 1, []int{0}, goCmd(t, "reportgrandchild"), func(pid int, ino uint64, out *bufio.Reader) {
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the grandchild pid: %v", err)
		}
		gpid, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil {
			t.Fatal(err)
		}
		checkNoChannel(t, gpid, ino)
	})
	doc, err := c.Finish([]RankExit{run.exit})
	if err != nil || !doc.OK || string(doc.Results[0].Value) != `"before the grandchild"` {
		t.Fatalf("%v %+v", err, doc)
	}
}

// checkNoChannel asserts that process pid holds no descriptor on the pipe ino, then kills it and waits until it is
// gone.
func checkNoChannel(t *testing.T, pid int, ino uint64) {
	t.Helper()
	defer func() {
		syscall.Kill(pid, syscall.SIGKILL)
		testutil.WaitGone(t, pid)
	}()
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	if err != nil || len(fds) == 0 {
		t.Fatalf("listing /proc/%d/fd: %v (%d fds)", pid, err, len(fds))
	}
	want := fmt.Sprintf("pipe:[%d]", ino)
	for _, fd := range fds {
		if l, _ := os.Readlink(fd); l == want {
			t.Errorf("grandchild pid %d holds the result channel as %s -> %s", pid, fd, l)
		}
	}
}

func TestMergeAcrossNodes(t *testing.T) {
	node1 := NewCollector(Options{NodeRank: 1})
	runs1 := runWorld(t, node1, []spec{{[]int{2}, goCmd(t, "report")}, {[]int{0}, goCmd(t, "report")}})
	node0 := NewCollector(Options{NodeRank: 0, Nodes: 2, WorldSize: 4})
	runs0 := runWorld(t, node0, []spec{{[]int{0}, goCmd(t, "report")}, {[]int{1}, goCmd(t, "report")}})
	err := node0.Add(1, node1.Share())
	ce := only(t, err, ErrDuplicateResult)
	if !strings.Contains(ce.Message, "(node 1)") || !strings.Contains(ce.Message, "(node 0)") {
		t.Fatalf("cross-node duplicate does not name the nodes: %q", ce.Message)
	}
	doc, err := node0.Finish(append(exitsOf(runs0), exitsOf(runs1)...))
	only(t, err, ErrDuplicateResult)
	if len(doc.Results) != 3 || doc.Results[2].Node != 1 || doc.World.Nodes != 2 {
		t.Fatalf("merged results: %+v", doc.Results)
	}
	_ = worker.Version
}

// TestMergeRemoteViolations: what goes wrong on node 1 reaches node 0's document through Share/Add (as JSON, as the
// rendezvous carries it): a worker of node 1 that reports nothing is missing, its malformed frame and its foreign
// report are kept, named with node 1, and the run exits 65.
func TestMergeRemoteViolations(t *testing.T) {
	node1 := NewCollector(Options{NodeRank: 1, Required: true})
	runs1 := make([]ran, 3)
	for i, s := range []struct {
		rank int
		mode string
	}{{1, "silent"}, {2, "badjson"}, {3, "foreign"}} {
		runs1[i] = launch(t, node1, s.rank, 4, []int{s.rank}, goCmd(t, s.mode), nil)
	}
	node0 := NewCollector(Options{NodeRank: 0, Nodes: 2, WorldSize: 4, Required: true})
	runs0 := []ran{launch(t, node0, 0, 4, []int{0}, goCmd(t, "report"), nil)}
	b, err := json.Marshal(node1.Share())
	if err != nil {
		t.Fatal(err)
	}
	var shared Share
	if err := json.Unmarshal(b, &shared); err != nil {
		t.Fatal(err)
	}
	if err := node0.Add(1, &shared); !errors.Is(err, ErrMalformedFrame) || !errors.Is(err, ErrForeignReplica) {
		t.Fatalf("Add: %v, want the malformed frame and the foreign report of node 1", err)
	}
	doc, err := node0.Finish(append(exitsOf(runs0), exitsOf(runs1)...))
	// Rank 2's malformed frame also leaves its replica missing, as on one host.
	want := map[string]bool{"missing_result 1": true, "malformed_frame 2": true, "missing_result 2": true, "foreign_replica 3": true}
	if len(doc.Violations) != len(want) || len(contractErrors(err)) != len(want) {
		t.Fatalf("violations %+v (%v), want %v", doc.Violations, err, want)
	}
	for _, v := range doc.Violations {
		if !want[fmt.Sprintf("%s %d", v.Kind, v.Rank)] || v.Hint == "" || !strings.Contains(v.Message, "node 1") {
			t.Errorf("violation %+v, want one of %v naming node 1", v, want)
		}
	}
	if doc.ExitCode != failure.ExitResults || doc.OK {
		t.Fatalf("exit %d ok=%v, want %d", doc.ExitCode, doc.OK, failure.ExitResults)
	}
	if len(doc.Results) != 2 || doc.Results[1].Replica != 3 || doc.Results[1].Node != 1 {
		t.Fatalf("results %+v, want replica 0 (node 0) and 3 (node 1)", doc.Results)
	}
}

// TestMergeRemoteSeed: the seed scenario across nodes: node 1's worker reports replica 0 (foreign there) and node
// 0's owner reports it too: node 0's document has one duplicate naming both nodes, not a foreign report.
func TestMergeRemoteSeed(t *testing.T) {
	node1 := NewCollector(Options{NodeRank: 1})
	runs1 := []ran{launch(t, node1, 1, 2, []int{1}, goCmd(t, "seed0"), nil)}
	node0 := NewCollector(Options{NodeRank: 0, Nodes: 2, WorldSize: 2})
	runs0 := []ran{launch(t, node0, 0, 2, []int{0}, goCmd(t, "report"), nil)}
	_ = node0.Add(1, node1.Share())
	doc, err := node0.Finish(append(exitsOf(runs0), exitsOf(runs1)...))
	ce := only(t, err, ErrDuplicateResult)
	if !strings.Contains(ce.Message, "2 results for replica 0") || !strings.Contains(ce.Message, "(node 1)") {
		t.Fatalf("cross-node seed duplicate: %q", ce.Message)
	}
	if len(doc.Violations) != 1 || doc.ExitCode != failure.ExitResults {
		t.Fatalf("document %+v", doc)
	}
}
