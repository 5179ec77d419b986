package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"tpurun/internal/failure"
	"tpurun/internal/results"
	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
)

// TestMultihostRemoteViolations: 2 nodes x 1 Go result worker (rank 1 runs on node 1): whatever goes wrong with
// rank 1's results on node 1 (a missing result, a malformed frame, a foreign replica) is in node 0's document,
// named with rank 1, and every node exits 65.
func TestMultihostRemoteViolations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode, kind string
		extra      []string
	}{
		{"missing", "missing_result", []string{"--expect-results"}},
		{"garbage", "malformed_frame", nil},
		{"foreign", "foreign_replica", nil},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			ep := testutil.FreeEndpoint(t)
			var nodes []*node
			for i := 0; i < 2; i++ {
				args := []string{"--device", "cpu", "--nprocs", "1", "--nnodes", "2", "--node-rank", strconv.Itoa(i),
					"--rdzv-backend", "tcp", "--rdzv-endpoint", ep, "--rdzv-id", "remote-" + tc.mode, "--rdzv-timeout", joinTimeout,
					"--node-name", "n" + strconv.Itoa(i), "--json"}
				args = append(append(args, tc.extra...), "--", self(t))
				nodes = append(nodes, startNode(t, append(os.Environ(), resultWorkers(tc.mode)...), args...))
			}
			for i, n := range nodes {
				if code := n.wait(t); code != failure.ExitResults {
					t.Fatalf("node %d: exit %d, want %d\nstderr:\n%s\nnode 0 stdout:\n%s", i, code, failure.ExitResults,
						n.stderr.String(), nodes[0].stdout.String())
				}
			}
			var doc results.Document
			if err := json.Unmarshal([]byte(nodes[0].stdout.String()), &doc); err != nil {
				t.Fatalf("node 0 --json: %v\n%s", err, nodes[0].stdout.String())
			}
			if a, b := nodes[0].stdout.String(), nodes[1].stdout.String(); a != b {
				t.Fatalf("--json on node 1 printed\n%s\nnode 0 printed\n%s\nwant the world's document on both", b, a)
			}
			if doc.OK || doc.ExitCode != failure.ExitResults || len(doc.Violations) != 1 {
				t.Fatalf("document ok=%v exit %d violations %+v, want one %s", doc.OK, doc.ExitCode, doc.Violations, tc.kind)
			}
			v := doc.Violations[0]
			if v.Kind != tc.kind || v.Rank != 1 || v.Hint == "" || !strings.Contains(v.Message, "node 1") {
				t.Fatalf("violation %+v, want %s of rank 1 naming node 1", v, tc.kind)
			}
			if len(doc.Results) == 0 || doc.Results[0].Replica != 0 || doc.Results[0].Node != 0 {
				t.Fatalf("node 0's own result is not kept: %+v", doc.Results)
			}
			if !strings.Contains(nodes[0].stderr.String(), tc.kind) {
				t.Fatalf("node 0's stderr does not name %s:\n%s", tc.kind, nodes[0].stderr.String())
			}
		})
	}
}

// TestMultihostHugeResults: 2 nodes x 1 worker, each reporting a 5 MB result, over the TCP and the etcd
// rendezvous: node 0's document holds both whole and every node exits 0. Node 1's share exceeded the TCP
// rendezvous's 4 MiB message (etcd's 1.5 MiB request), both nodes exited 69 and no document was written.
func TestMultihostHugeResults(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"tcp", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ep := testutil.FreeEndpoint(t)
			if backend == "etcd" {
				ep = etcdtest.StartOne(t)
			}
			doc := filepath.Join(t.TempDir(), "results.json")
			var nodes []*node
			for i := 0; i < 2; i++ {
				args := []string{"--device", "cpu", "--nprocs", "1", "--nnodes", "2", "--node-rank", strconv.Itoa(i),
					"--rdzv-backend", backend, "--rdzv-endpoint", ep, "--rdzv-id", "huge-" + backend, "--rdzv-timeout", joinTimeout,
					"--node-name", "n" + strconv.Itoa(i), "--results", doc + strconv.Itoa(i), "--expect-results", "--", self(t)}
				nodes = append(nodes, startNode(t, append(os.Environ(), resultWorkers("huge")...), args...))
			}
			for i, n := range nodes {
				if code := n.wait(t); code != 0 {
					t.Fatalf("node %d: exit %d, want 0\nstderr:\n%s", i, code, n.stderr.String())
				}
			}
			for i := range 2 { // node 0 builds the world's document; node 1 receives it (both asked with --results)
				b, err := os.ReadFile(doc + strconv.Itoa(i))
				if err != nil {
					t.Fatalf("node %d: %v", i, err)
				}
				var d results.Document
				if err := json.Unmarshal(b, &d); err != nil {
					t.Fatal(err)
				}
				if !d.OK || len(d.Results) != 2 {
					t.Fatalf("node %d's document ok=%v with %d results, want both", i, d.OK, len(d.Results))
				}
				for _, r := range d.Results {
					var v string
					if err := json.Unmarshal(r.Value, &v); err != nil || len(v) != 5_000_000 || v[0] != byte('0'+r.Rank) {
						t.Fatalf("node %d's replica %d (rank %d, node %d): a %d-byte value, want the 5 MB string whole (%v)", i, r.Replica, r.Rank, r.Node, len(v), err)
					}
				}
			}
		})
	}
}
