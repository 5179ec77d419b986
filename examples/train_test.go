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

// TestTrainPyOnCPU: two ranks under tpurun each print their line of the gloo all_reduce, with the right sum, and
// rank 0 the --lr it was given. Two, not four: every rank imports torch (about 2 s of CPU each on a 2-core machine,
// where four ranks took 12 to 24 s of the suite's time), and one gloo group whose ranks and sum are right needs no
// more than two to show.
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
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "tpurun"), "--nprocs", "2", "--", "python3", "train.py", "--lr", "3e-4")
	// python3 is Debian's, with torch; the metadata server refuses at once (a CPU host has none)
	cmd.Env = []string{"PATH=" + bin + ":" + filepath.Dir(py) + ":/bin", "HOME=" + t.TempDir(), "GCE_METADATA_HOST=127.0.0.1:1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tpurun --nprocs 2 -- python3 train.py --lr 3e-4: %v (%v)\n%s", err, ctx.Err(), out)
	}
	if !strings.Contains(string(out), "[0] rank 0/2: lr 0.0003\n") {
		t.Errorf("rank 0 did not print the --lr it was given:\n%s", out)
	}
	var lines []string
	for _, m := range regexp.MustCompile(`rank (\d)/2: all_reduce sum (\d+) \(expected (\d+)\)`).FindAllStringSubmatch(string(out), -1) {
		lines = append(lines, strings.Join(m[1:], " "))
	}
	slices.Sort(lines)
	if want := []string{"0 1 1", "1 1 1"}; !slices.Equal(lines, want) {
		t.Fatalf("ranks' lines (rank sum expected) %q, want %q; output:\n%s", lines, want, out)
	}
}
