package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"tpurun/launcher"
	"tpurun/launcher/launchertest"
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
	if !slices.Equal(o.tr.handled, []os.Signal{syscall.SIGTERM, syscall.SIGINT}) {
		t.Fatalf("handled signals %v", o.tr.handled)
	}
	t.Setenv("PET_MAX_RESTARTS", "many")
	var ce *launcher.ConfigError
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
		dir := launchertest.FakeDir(t)
		r := runCLI(t, dir, []string{"TPURUN_FAKE=exit:0", "PET_NPROC_PER_NODE=3"}, "--nprocs", "2", "--device", "cpu", "--", os.Args[0])
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		if es, err := os.ReadDir(filepath.Join(dir, "pids")); err != nil || len(es) != 2 {
			t.Fatalf("%d workers started (%v), want --nprocs 2, not PET_NPROC_PER_NODE=3\n%s", len(es), err, r.stderr)
		}
		launchertest.AssertAllGone(t, dir, 2, 5*time.Second)
	})
	t.Run("PET_SHUTDOWN_TIMEOUT vs --grace", func(t *testing.T) {
		t.Parallel()
		dir := launchertest.FakeDir(t)
		r := runCLI(t, dir, []string{"TPURUN_FAKE=exit:0", "PET_SHUTDOWN_TIMEOUT=5"}, "--grace", "1s", "--nprocs", "1", "--device", "cpu", "--", os.Args[0])
		if r.code != 0 {
			t.Fatalf("exit %d, want 0: --grace given, PET_SHUTDOWN_TIMEOUT ignored\n%s", r.code, r.stderr)
		}
		launchertest.AssertAllGone(t, dir, 1, 5*time.Second)
	})
}
