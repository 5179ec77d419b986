package launcher_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"tpurun/internal/attempt"

	"tpurun/internal/failure"
	"tpurun/internal/safepath"
	"tpurun/internal/spec"
	"tpurun/internal/topology"
	"tpurun/launcher"
)

// TestRunRefusesPlantedLogDirSymlink: the run's log directory is new (<run>_<random>), so the only one who can plant
// a link below it is a worker of an earlier attempt. Attempt 0's rank 0 plants a directory symlink where attempt
// 1's rank 0 directory goes (DIR/<run>_<random>/attempt_1/0 -> victim) and fails; the restart starts nothing and
// exits 2 naming the link, and the victim is untouched: its error.json is not deleted and no log file is created
// there. A run id of ".." is refused before anything.
func TestRunRefusesPlantedLogDirSymlink(t *testing.T) {
	logs, victim := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(victim, "error.json"), []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, victim)
	plan, _ := topology.CPUPlan(2)
	dir := t.TempDir()
	// $TORCHELASTIC_ERROR_FILE is DIR/<run>_<random>/attempt_0/<local rank>/error.json.
	script := `run=$(dirname "$(dirname "$(dirname "$TORCHELASTIC_ERROR_FILE")")")
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  [ "$LOCAL_RANK" = 0 ] && mkdir -p "$run/attempt_1" && ln -s "$VICTIM" "$run/attempt_1/0" && exit 3
  exec sleep 30
fi
touch "$RAN/ran-$LOCAL_RANK"`
	_, err := launcher.RunInternal(context.Background(), spec.Spec{
		Options: attempt.Options{
			Program:     []string{"/bin/sh", "-c", script},
			Env:         append(os.Environ(), "VICTIM="+victim, "RAN="+dir),
			MaxRestarts: 1,
			Grace:       5 * time.Second,
			LogDir:      logs,
			RunID:       "planted",
		},
		Plan:   plan,
		Reap:   true,
		Stdout: io.Discard,
		Stderr: io.Discard,
	})
	var ue *safepath.UnsafePathError
	if !errors.As(err, &ue) || failure.ExitCode(err) != failure.ExitUsage || !strings.Contains(err.Error(), victim) {
		t.Fatalf("err %v (exit %d), want an UnsafePathError naming %s (exit 2)", err, failure.ExitCode(err), victim)
	}
	if after := snapshot(t, victim); !maps.Equal(before, after) {
		t.Fatalf("the victim changed: %v -> %v", before, after)
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Fatalf("a worker of attempt 1 ran: %v", es)
	}
	_, err = launcher.RunInternal(context.Background(), spec.Spec{
		Options: attempt.Options{Program: []string{"true"}, LogDir: logs, RunID: ".."},
		Plan:    plan,
	})
	if failure.ExitCode(err) != failure.ExitUsage {
		t.Fatalf("run id '..': err %v, want exit 2", err)
	}
}

// snapshot lists every path under dir with its content (for files) or link target, to prove nothing changed.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			out[p] = "-> " + l
			return err
		case d.IsDir():
			out[p] = "dir"
		default:
			b, err := os.ReadFile(p)
			out[p] = string(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
