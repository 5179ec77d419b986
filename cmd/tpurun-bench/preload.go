package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// preloadWorker is the Python program of the --preload rows: it imports torch and torch.distributed (what the
// issue measured), marks BENCH_DIR/ready-<attempt>-<rank> with the time, then
//
//	pss      waits for BENCH_DIR/measured (the harness sums the PSS of the whole tree meanwhile) and exits 0;
//	restart  in attempt 0, rank 0 waits until every rank is ready, marks BENCH_DIR/failed with the time and exits
//	         1, the others wait to be stopped; in attempt 1 every rank exits 0.
const preloadWorker = `import os, sys, time
import torch, torch.distributed
d, rank = os.environ["BENCH_DIR"], os.environ["RANK"]
n, attempt = int(os.environ["WORLD_SIZE"]), os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")

def mark(name):
    with open(os.path.join(d, name + ".tmp"), "w") as f:
        f.write(repr(time.time()))
    os.rename(os.path.join(d, name + ".tmp"), os.path.join(d, name))

def wait(cond):
    while not cond():
        time.sleep(0.005)

mark("ready-%s-%s" % (attempt, rank))
if sys.argv[1] == "pss":
    wait(lambda: os.path.exists(os.path.join(d, "measured")))
elif attempt == "0":
    wait(lambda: sum(f.startswith("ready-0-") for f in os.listdir(d)) >= n)
    if rank != "0":
        wait(lambda: False)
    mark("failed")
    sys.exit(1)
`

// preloadPoint is one launch of N torch workers: when every one was past its imports, and the PSS of the tree.
type preloadPoint struct {
	ready time.Duration
	pss   int64 // KiB
}

// measurePreload runs the --preload rows: for N = 2 and 8 torch workers, the time until every one is past its
// imports and the total PSS of the launcher's tree, with and without --preload, against N shells and torchrun;
// and the restart latency (a rank fails → every rank of the next attempt past its imports) with and without.
func measurePreload(cfg *config) ([]row, error) {
	dir, err := os.MkdirTemp("", "tpurun-bench-preload")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "worker.py")
	if err := os.WriteFile(script, []byte(preloadWorker), 0o644); err != nil {
		return nil, err
	}
	runs := max(3, cfg.runs/2)
	var rows []row
	for _, n := range []int{2, 8} {
		ns := strconv.Itoa(n)
		launchers := []struct {
			name string
			argv []string
		}{
			{"tpurun --preload", []string{cfg.tpurun, "--nprocs", ns, "--device", "cpu", "--preload", "torch,torch.distributed", "--", cfg.python, "-u", script, "pss"}},
			{"tpurun", []string{cfg.tpurun, "--nprocs", ns, "--device", "cpu", "--", cfg.python, "-u", script, "pss"}},
			{"sh", []string{"/bin/sh", "-c", fmt.Sprintf(`i=0; while [ $i -lt %d ]; do RANK=$i WORLD_SIZE=%d "%s" -u "%s" pss & i=$((i+1)); done; wait`, n, n, cfg.python, script)}},
			{"torchrun", torchrunArgs(cfg, n, script, "pss")},
		}
		got := map[string]preloadPoint{}
		for _, l := range launchers {
			if l.name == "torchrun" && cfg.torchrun == "" {
				continue
			}
			p, err := repeatPreload(runs, func() (preloadPoint, error) { return launchReady(l.argv, n) })
			if err != nil {
				return rows, fmt.Errorf("%s, N=%d: %w", l.name, n, err)
			}
			got[l.name] = p
			fmt.Fprintf(os.Stderr, "preload: %s, N=%d: all ready %s, PSS %s\n", l.name, n, ms(p.ready), mib(p.pss))
		}
		rows = append(rows, preloadRows(n, got)...)
		r, err := measureRestart(cfg, script, n, runs)
		if err != nil {
			return rows, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// preloadRowsOrFailure is measurePreload's rows, and a row naming its failure if it failed.
func preloadRowsOrFailure(cfg *config) []row {
	rows, err := measurePreload(cfg)
	if err != nil {
		rows = append(rows, row{name: "--preload", target: "measured", note: "failed: " + oneLine(err)})
	}
	return rows
}

// preloadRows are the ready-time and PSS rows of N workers: --preload against tpurun without it (the targets),
// against N shells and against torchrun (for reference).
func preloadRows(n int, got map[string]preloadPoint) []row {
	pre := got["tpurun --preload"]
	kinds := []struct {
		what, note, target string
		limit              float64
		ratio              func(b preloadPoint) float64
		figure             func(p preloadPoint) string
	}{
		{"all ready", "launch → every worker past its imports", "≤ 0.9", 0.9,
			func(b preloadPoint) float64 { return seconds(pre.ready) / seconds(b.ready) },
			func(p preloadPoint) string { return ms(p.ready) }},
		{"total PSS", "sum of Pss (smaps_rollup) of the launcher's whole tree, preloaded interpreter included", "≤ 0.3", 0.3,
			func(b preloadPoint) float64 { return float64(pre.pss) / float64(b.pss) },
			func(p preloadPoint) string { return mib(p.pss) }},
	}
	var rows []row
	for _, k := range kinds {
		for _, base := range []string{"tpurun", "sh", "torchrun"} {
			b, ok := got[base]
			if !ok {
				continue
			}
			ratio := k.ratio(b)
			r := row{name: fmt.Sprintf("%d × import torch: %s, --preload ÷ %s", n, k.what, base), figure: k.figure(pre),
				baseline: base + ": " + k.figure(b), ratio: ratio, target: "measured", pass: true, note: k.note}
			if base == "tpurun" {
				r.target, r.pass = k.target, ratio <= k.limit
			}
			rows = append(rows, r)
		}
	}
	return rows
}

func mib(kib int64) string { return fmt.Sprintf("%.0f MiB", float64(kib)/1024) }

// repeatPreload runs f n times: the median ready time and the median PSS.
func repeatPreload(n int, f func() (preloadPoint, error)) (preloadPoint, error) {
	var ready []time.Duration
	var pss []int64
	for range n {
		p, err := f()
		if err != nil {
			return preloadPoint{}, err
		}
		ready, pss = append(ready, p.ready), append(pss, p.pss)
	}
	slices.Sort(ready)
	slices.Sort(pss)
	return preloadPoint{ready: ready[n/2], pss: pss[n/2]}, nil
}

// launchReady runs argv (n workers of preloadWorker in pss mode) and returns when the last one was past its
// imports, counted from the launch, and the PSS of the whole tree then.
func launchReady(argv []string, n int) (preloadPoint, error) {
	d, err := os.MkdirTemp("", "tpurun-bench-ready")
	if err != nil {
		return preloadPoint{}, err
	}
	defer os.RemoveAll(d)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "BENCH_DIR="+d)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return preloadPoint{}, err
	}
	last, err := waitMarks(d, "ready-0-", n, cmd)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return preloadPoint{}, fmt.Errorf("%w\n%s", err, tail(stderr.String()))
	}
	pss := treePSS(cmd.Process.Pid)
	_ = os.WriteFile(filepath.Join(d, "measured"), nil, 0o644)
	if err := cmd.Wait(); err != nil {
		return preloadPoint{}, fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, tail(stderr.String()))
	}
	return preloadPoint{ready: last.Sub(start), pss: pss}, nil
}

// measureRestart: the restart latency of n torch workers with and without --preload: from the moment rank 0
// fails (after every rank was past its imports) until every rank of the next attempt is past its imports.
func measureRestart(cfg *config, script string, n, runs int) (row, error) {
	lat := map[bool]time.Duration{}
	for _, preload := range []bool{true, false} {
		var all []time.Duration
		for range runs {
			argv := []string{cfg.tpurun, "--nprocs", strconv.Itoa(n), "--device", "cpu", "--max-restarts", "1"}
			if preload {
				argv = append(argv, "--preload", "torch,torch.distributed")
			}
			d, err := restartOnce(append(argv, "--", cfg.python, "-u", script, "restart"), n)
			if err != nil {
				return row{}, fmt.Errorf("restart (preload %v), N=%d: %w", preload, n, err)
			}
			all = append(all, d)
		}
		slices.Sort(all)
		lat[preload] = all[len(all)/2]
		fmt.Fprintf(os.Stderr, "preload: restart of %d (preload %v): %v\n", n, preload, all)
	}
	ratio := seconds(lat[true]) / seconds(lat[false])
	return row{name: fmt.Sprintf("restart of %d torch workers, --preload ÷ without", n), figure: ms(lat[true]),
		baseline: "without: " + ms(lat[false]), ratio: ratio, target: "≤ 0.1", pass: ratio <= 0.1,
		note: "rank 0 exits 1 → every rank of attempt 1 past its imports"}, nil
}

func restartOnce(argv []string, n int) (time.Duration, error) {
	d, err := os.MkdirTemp("", "tpurun-bench-restart")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(d)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "BENCH_DIR="+d)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%w\n%s", err, tail(stderr.String()))
	}
	failed, err := stamp(filepath.Join(d, "failed"))
	if err != nil {
		return 0, err
	}
	last, err := waitMarks(d, "ready-1-", n, nil)
	if err != nil {
		return 0, err
	}
	return last.Sub(failed), nil
}

// waitMarks waits until n files prefix* are in d (while cmd, if any, runs) and returns the latest time in them.
func waitMarks(d, prefix string, n int, cmd *exec.Cmd) (time.Time, error) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		m, _ := filepath.Glob(filepath.Join(d, prefix+"*"))
		m = slices.DeleteFunc(m, func(s string) bool { return strings.HasSuffix(s, ".tmp") })
		if len(m) >= n {
			var last time.Time
			for _, f := range m {
				t, err := stamp(f)
				if err != nil {
					return time.Time{}, err
				}
				if t.After(last) {
					last = t
				}
			}
			return last, nil
		}
		if cmd == nil || time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%d of %d workers marked %s", len(m), n, prefix)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func stamp(path string) (time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, err
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", path, err)
	}
	return time.Unix(0, int64(f*1e9)), nil
}

// treePSS sums the Pss of pid and every descendant (KiB, /proc/<pid>/smaps_rollup).
func treePSS(pid int) int64 {
	var total int64
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		total += pssOf(p)
		kids, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", p))
		for _, k := range kids {
			b, _ := os.ReadFile(k)
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					queue = append(queue, c)
				}
			}
		}
	}
	return total
}

func pssOf(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}
