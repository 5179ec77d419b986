// Package examples_test runs examples/train.py, the program of the JobSet examples and of the README's first
// example (`tpurun --nprocs 2 -- python3 examples/train.py --lr 3e-4`, which the doc test runs as written), and
// checks examples/Dockerfile, the image the JobSets run.
package examples_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"tpurun/launcher/launchertest"
)

// TestTrainPyOnCPU: four ranks under tpurun each print their line of the gloo all_reduce, with the right sum, and
// rank 0 the --lr it was given.
func TestTrainPyOnCPU(t *testing.T) {
	py := launchertest.Need(t, "torch")
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "tpurun/cmd/tpurun")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build tpurun: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), launchertest.Deadline())
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "tpurun"), "--nprocs", "4", "--", "python3", "train.py", "--lr", "3e-4")
	// python3 is Debian's, with torch; the metadata server refuses at once (a CPU host has none)
	cmd.Env = []string{"PATH=" + bin + ":" + filepath.Dir(py) + ":/bin", "HOME=" + t.TempDir(), "GCE_METADATA_HOST=127.0.0.1:1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tpurun --nprocs 4 -- python3 train.py --lr 3e-4: %v (%v)\n%s", err, ctx.Err(), out)
	}
	if !strings.Contains(string(out), "[0] rank 0/4: lr 0.0003\n") {
		t.Errorf("rank 0 did not print the --lr it was given:\n%s", out)
	}
	var lines []string
	for _, m := range regexp.MustCompile(`rank (\d)/4: all_reduce sum (\d+) \(expected (\d+)\)`).FindAllStringSubmatch(string(out), -1) {
		lines = append(lines, strings.Join(m[1:], " "))
	}
	slices.Sort(lines)
	if want := []string{"0 6 6", "1 6 6", "2 6 6", "3 6 6"}; !slices.Equal(lines, want) {
		t.Fatalf("ranks' lines (rank sum expected) %q, want %q; output:\n%s", lines, want, out)
	}
}
