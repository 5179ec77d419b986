package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"tpurun/internal/failure"
	"tpurun/internal/testutil"
)

func TestTorchrunFlagsThroughParse(t *testing.T) {
	t.Setenv("PET_MAX_RESTARTS", "3")
	t.Setenv("PET_ROLE", "trainer")
	t.Setenv("PYTHON_EXEC", "/usr/bin/python3")
	o, err := parse([]string{"--role", "flagwins", "--shutdown_timeout", "7s", "--monitor-interval", "5", "--signals-to-handle", "SIGTERM,INT",
		"--standalone", "-m", "pkg.main", "--x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.spec.MaxRestarts != 3 || o.spec.Role != "flagwins" || o.spec.Grace != 7*time.Second {
		t.Fatalf("max-restarts %d (want 3 from PET_MAX_RESTARTS), role %q (want the flag's), grace %s (want 7s)", o.spec.MaxRestarts, o.spec.Role, o.spec.Grace)
	}
	if got := strings.Join(o.spec.Program, " "); got != "/usr/bin/python3 -u -m pkg.main --x" {
		t.Fatalf("program %q", got)
	}
	if !slices.Contains(o.tr.noEffect, "--signals-to-handle=SIGTERM,INT (every catchable signal is forwarded)") {
		t.Fatalf("notes %q: want --signals-to-handle's", o.tr.noEffect)
	}
	t.Setenv("PET_MAX_RESTARTS", "many")
	var ce *failure.ConfigError
	if _, err := parse([]string{"prog"}, io.Discard); !errors.As(err, &ce) || ce.Field != "PET_MAX_RESTARTS" {
		t.Fatalf("bad PET_MAX_RESTARTS: err %v, want a ConfigError naming it", err)
	}
	t.Setenv("PET_MAX_RESTARTS", "")
	for _, args := range [][]string{
		{"--signals-to-handle", "SIGKILL", "prog"},
		{"--no-python", "-m", "mod"},
		{"--grace", "1s", "--shutdown-timeout", "2s", "prog"},
	} {
		if _, err := parse(args, io.Discard); !errors.As(err, &ce) {
			t.Errorf("parse(%q): err %v, want a *ConfigError", args, err)
		}
	}
}

// TestPETEnvDoesNotBeatAnAliasFlag: a PET_* variable of one spelling of a setting never overrides the other
// spelling given on the command line (nprocs/nproc-per-node, grace/shutdown-timeout).
func TestPETEnvDoesNotBeatAnAliasFlag(t *testing.T) {
	t.Parallel()
	t.Run("PET_NPROC_PER_NODE vs --nprocs", func(t *testing.T) {
		t.Parallel()
		dir := testutil.FakeDir(t)
		r := runCLI(t, dir, []string{testutil.Fake("exit:0"), "PET_NPROC_PER_NODE=3"}, "--nprocs", "2", "--device", "cpu", "--", testutil.Program(t))
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		if es, err := os.ReadDir(filepath.Join(dir, "pids")); err != nil || len(es) != 2 {
			t.Fatalf("%d workers started (%v), want --nprocs 2, not PET_NPROC_PER_NODE=3\n%s", len(es), err, r.stderr)
		}
		testutil.AssertAllGone(t, dir, 2)
	})
	t.Run("PET_SHUTDOWN_TIMEOUT vs --grace", func(t *testing.T) {
		t.Parallel()
		dir := testutil.FakeDir(t)
		r := runCLI(t, dir, []string{testutil.Fake("exit:0"), "PET_SHUTDOWN_TIMEOUT=5"}, "--grace", "1s", "--nprocs", "1", "--device", "cpu", "--", testutil.Program(t))
		if r.code != 0 {
			t.Fatalf("exit %d, want 0: --grace given, PET_SHUTDOWN_TIMEOUT ignored\n%s", r.code, r.stderr)
		}
		testutil.AssertAllGone(t, dir, 1)
	})
}

// TestTorchrunCommandLinesAsTheyAre: the first lines a torchrun user types run unchanged: the classic static
// multi-node line (no --rdzv-id, node 0 named by --master_addr/--master_port), torchtitan's single-node c10d line
// (endpoint localhost:0, -m, --tee, --local-ranks-filter, --role), and two agents on one host told apart only by
// --node-rank, with torchrun's other flags (-r, --start_method, --local_addr) accepted.
func TestTorchrunCommandLinesAsTheyAre(t *testing.T) {
	t.Parallel()
	port := portBase(t)
	for _, tc := range []struct {
		name  string
		nodes func(i int) []string
		n     int
	}{
		{"static", func(i int) []string {
			return []string{"--nnodes=2", "--node_rank=" + strconv.Itoa(i), "--master_addr=127.0.0.1", "--master_port=" + strconv.Itoa(port)}
		}, 2},
		{"two-agents-one-host", func(i int) []string {
			return []string{"--nnodes", "2", "--node-rank", strconv.Itoa(i), "--rdzv_backend", "c10d", "--rdzv_endpoint",
				"127.0.0.1:" + strconv.Itoa(port+8), "--start_method", "spawn", "-r", "0", "--local_addr", "127.0.0.1"}
		}, 2},
		{"torchtitan-single-node", func(int) []string {
			return []string{"--rdzv_backend", "c10d", "--rdzv_endpoint=localhost:0", "--local-ranks-filter", "0", "--role", "rank",
				"--tee", "3", "--log-dir", t.TempDir()}
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			var nodes []*node
			for i := range tc.n {
				args := append(append([]string{"--nproc_per_node=2"}, tc.nodes(i)...), "--no-python", self(t))
				nodes = append(nodes, startNode(t, append(os.Environ(), "FAKE_DIR="+dir, testutil.Fake("env")), args...))
			}
			for i, n := range nodes {
				if code := n.wait(t); code != 0 {
					t.Fatalf("node %d: exit %d\n%s", i, code, n.stderr.String())
				}
			}
			files, _ := filepath.Glob(filepath.Join(dir, "env-*.json"))
			if len(files) != 2*tc.n {
				t.Fatalf("%d workers ran, want %d", len(files), 2*tc.n)
			}
			for _, f := range files {
				b, err := os.ReadFile(f)
				mustDo(t, err)
				ws := `"WORLD_SIZE=` + strconv.Itoa(2*tc.n) + `"`
				if !strings.Contains(string(b), ws) || !strings.Contains(string(b), `"MASTER_ADDR=127.0.0.1"`) ||
					(tc.name == "static" && !strings.Contains(string(b), `"MASTER_PORT=`+strconv.Itoa(port)+`"`)) {
					t.Fatalf("%s: want %s, MASTER_ADDR=127.0.0.1 (and MASTER_PORT=%d for the static line): %s", f, ws, port, b)
				}
			}
		})
	}
}
