package main

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"tpurun/launcher/launchertest"

	"tpurun/launcher"
	"tpurun/launcher/results"
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
			ep := launchertest.FreeEndpoint(t)
			var nodes []*node
			for i := 0; i < 2; i++ {
				args := []string{"--device", "cpu", "--nprocs", "1", "--nnodes", "2", "--node-rank", strconv.Itoa(i),
					"--rdzv-backend", "tcp", "--rdzv-endpoint", ep, "--rdzv-id", "remote-" + tc.mode, "--rdzv-timeout", "20s",
					"--node-name", "n" + strconv.Itoa(i), "--json"}
				args = append(append(args, tc.extra...), "--", self(t))
				nodes = append(nodes, startNode(t, append(os.Environ(), "TPURUN_TEST_RESULTS="+tc.mode), args...))
			}
			for i, n := range nodes {
				if code := n.wait(t, 30*time.Second); code != launcher.ExitResults {
					t.Fatalf("node %d: exit %d, want %d\nstderr:\n%s\nnode 0 stdout:\n%s", i, code, launcher.ExitResults,
						n.stderr.String(), nodes[0].stdout.String())
				}
			}
			var doc results.Document
			if err := json.Unmarshal([]byte(nodes[0].stdout.String()), &doc); err != nil {
				t.Fatalf("node 0 --json: %v\n%s", err, nodes[0].stdout.String())
			}
			if doc.OK || doc.ExitCode != launcher.ExitResults || len(doc.Violations) != 1 {
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
