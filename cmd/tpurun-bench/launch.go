package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// launchNs are the N of the launch rows: N × /bin/true started and reaped.
var launchNs = []int{1, 8, 64, 256, 1024}

// launchTargets are the ratios to the shell each N is held to (docs/DESIGN.md's performance budget).
var launchTargets = map[int]float64{1: 2.0, 8: 1.5, 64: 1.5, 256: 2.0, 1024: 2.0}

// launchSeries is every run of one command at one N: wall and CPU (user + system of it and its reaped children).
type launchSeries struct {
	wall, cpu []time.Duration
}

func (s *launchSeries) add(smp sample) {
	s.wall = append(s.wall, smp.wall)
	s.cpu = append(s.cpu, smp.cpu)
}

// launchRuns are the runs of one N: tpurun, the shell, tpurun's floor and (with -before) an older tpurun,
// interleaved.
type launchRuns struct {
	n                     int
	tpurun, shell, before launchSeries
	floor                 launchSeries // tpurun --version: the process's start and exit, which no launch can go below
	tpurunRSS             []int64
}

// shellArgv starts n background /bin/true and waits for them: the baseline every launch row is measured against.
func shellArgv(n int) []string {
	return []string{"/bin/sh", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do /bin/true & i=$((i+1)); done; wait", n)}
}

func tpurunArgv(bin string, n int) []string {
	return []string{bin, "--nprocs", strconv.Itoa(n), "--", "/bin/true"}
}

// measureLaunch runs every N runs times, tpurun and the shell (and before, when given) one after the other within
// each run, in an order that alternates from run to run, so that a load that comes and goes on a shared machine
// falls on all of them alike. Each figure is then the median of its runs.
func measureLaunch(cfg *config, ns []int, before string) ([]launchRuns, error) {
	bins := []string{cfg.tpurun}
	if before != "" {
		bins = append(bins, before)
	}
	if err := sameStart(bins...); err != nil {
		return nil, err
	}
	out := make([]launchRuns, len(ns))
	for i, n := range ns {
		out[i].n = n
	}
	for r := 0; r < cfg.runs; r++ {
		for i, n := range ns {
			lr := &out[i]
			steps := []func() error{
				func() error {
					s, err := run(tpurunArgv(cfg.tpurun, n), nil, nil)
					lr.tpurun.add(s)
					lr.tpurunRSS = append(lr.tpurunRSS, s.maxRSS)
					return err
				},
				func() error {
					s, err := run(shellArgv(n), nil, nil)
					lr.shell.add(s)
					return err
				},
				func() error {
					s, err := run([]string{cfg.tpurun, "--version"}, nil, io.Discard)
					lr.floor.add(s)
					return err
				},
			}
			if before != "" {
				steps = append(steps, func() error {
					s, err := run(tpurunArgv(before, n), nil, nil)
					lr.before.add(s)
					return err
				})
			}
			if r%2 == 1 {
				slices.Reverse(steps)
			}
			for _, step := range steps {
				if err := step(); err != nil {
					return nil, err
				}
			}
		}
		fmt.Fprintf(os.Stderr, "launch: run %d of %d done\n", r+1, cfg.runs)
	}
	return out, nil
}

// sameStart puts each binary in the state a user's binary is in when it starts: its pages read from disk, not left
// in memory by whatever wrote the file. A binary the linker has just written (through a mapping) and one cp has just
// written start differently by 1-2 ms on this machine (cp's pages come in larger pieces, which fewer faults map),
// and a comparison of two binaries made in different ways measured that. Each file is synced, dropped from the page
// cache (POSIX_FADV_DONTNEED: its clean pages), and started once, unmeasured, to read it back. A binary on tmpfs
// keeps its pages (they are the file): binaries there all start from memory alike.
func sameStart(bins ...string) error {
	for _, bin := range bins {
		if err := evict(bin); err != nil {
			return fmt.Errorf("drop %s from the page cache: %w", bin, err)
		}
	}
	for _, bin := range bins {
		if _, err := run([]string{bin, "--version"}, nil, io.Discard); err != nil {
			return err
		}
	}
	return nil
}

// evict drops the file's pages from the page cache, once they are written.
func evict(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// median of ds (which it sorts).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// spread is "min–max" of ds, in ms.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	lo, hi := slices.Min(ds), slices.Max(ds)
	return fmt.Sprintf("%.1f–%.1f", float64(lo.Microseconds())/1000, float64(hi.Microseconds())/1000)
}

// ratioSpread is the interquartile range of the per-run ratios a[i]/b[i]: how much the ratio itself varied.
func ratioSpread(a, b []time.Duration) string {
	var rs []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			rs = append(rs, a[i].Seconds()/b[i].Seconds())
		}
	}
	if len(rs) == 0 {
		return "-"
	}
	slices.Sort(rs)
	return fmt.Sprintf("%.2f–%.2f", rs[len(rs)/4], rs[(3*len(rs))/4])
}

// launchPoints are the medians of every N, for the chart and the rows.
func launchPoints(runs []launchRuns) []launchPoint {
	var pts []launchPoint
	for _, lr := range runs {
		rss := slices.Clone(lr.tpurunRSS)
		slices.Sort(rss)
		p := launchPoint{n: lr.n, tpurun: median(slices.Clone(lr.tpurun.wall)), shell: median(slices.Clone(lr.shell.wall))}
		if len(rss) > 0 {
			p.tpurunRSS = rss[len(rss)/2]
		}
		pts = append(pts, p)
	}
	return pts
}

// launchRows are the report's launch rows: tpurun against the shell per N, and the growth from 256 to 1024.
func launchRows(runs []launchRuns) []row {
	var rows []row
	meds := map[int][2]time.Duration{}
	for _, lr := range runs {
		tp, sh := median(slices.Clone(lr.tpurun.wall)), median(slices.Clone(lr.shell.wall))
		floor := median(slices.Clone(lr.floor.wall))
		meds[lr.n] = [2]time.Duration{tp, sh}
		ratio := seconds(tp) / seconds(sh)
		target := launchTargets[lr.n]
		rows = append(rows, row{
			name: fmt.Sprintf("launch+reap %d × /bin/true", lr.n), figure: ms(tp), baseline: "sh: " + ms(sh),
			ratio: ratio, target: fmt.Sprintf("≤ %.1f", target), pass: ratio <= target,
			note: fmt.Sprintf("runs (ms): tpurun %s, sh %s; ratio IQR %s; CPU %s vs %s; floor (tpurun --version) %s, ÷ sh %.2f",
				spread(lr.tpurun.wall), spread(lr.shell.wall), ratioSpread(lr.tpurun.wall, lr.shell.wall),
				ms(median(slices.Clone(lr.tpurun.cpu))), ms(median(slices.Clone(lr.shell.cpu))), ms(floor), seconds(floor)/seconds(sh)),
		})
	}
	lo, okLo := meds[256]
	hi, okHi := meds[1024]
	if okLo && okHi {
		tg, sg := seconds(hi[0])/seconds(lo[0]), seconds(hi[1])/seconds(lo[1])
		rows = append(rows, row{
			name: "launch growth N=256 → 1024", figure: fmt.Sprintf("× %.2f", tg), baseline: fmt.Sprintf("sh: × %.2f", sg),
			ratio: tg / sg, target: "≤ 1.0 (grows no faster)", pass: tg <= sg, note: "median at 1024 ÷ median at 256",
		})
	}
	return rows
}

// renderLaunch is the table `-only launch` prints: per N the medians with their spread, the ratio to the shell,
// and with -before the older tpurun's figures of the same runs.
func renderLaunch(w io.Writer, runs []launchRuns, cfg config, before string) {
	host, _ := os.Hostname()
	fmt.Fprintf(w, "# launch rows\n\n%s, %d CPUs, %s, %d interleaved runs per figure (median; min–max in brackets)\n\n",
		host, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02 15:04 MST"), cfg.runs)
	head := "| N | tpurun | sh | tpurun ÷ sh (IQR) | target | tpurun CPU | sh CPU | floor | floor ÷ sh |"
	rule := "|---|---|---|---|---|---|---|---|---|"
	if before != "" {
		head += " before | before ÷ sh | before CPU |"
		rule += "---|---|---|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	cell := func(ds []time.Duration) string {
		return fmt.Sprintf("%s (%s)", ms(median(slices.Clone(ds))), spread(ds))
	}
	for _, lr := range runs {
		tp, sh := median(slices.Clone(lr.tpurun.wall)), median(slices.Clone(lr.shell.wall))
		verdict := "MISS"
		if seconds(tp)/seconds(sh) <= launchTargets[lr.n] {
			verdict = "PASS"
		}
		floor := median(slices.Clone(lr.floor.wall))
		fmt.Fprintf(w, "| %d | %s | %s | %.2f (%s) | ≤ %.1f %s | %s | %s | %s | %.2f |", lr.n, cell(lr.tpurun.wall),
			cell(lr.shell.wall), seconds(tp)/seconds(sh), ratioSpread(lr.tpurun.wall, lr.shell.wall), launchTargets[lr.n],
			verdict, ms(median(slices.Clone(lr.tpurun.cpu))), ms(median(slices.Clone(lr.shell.cpu))), ms(floor),
			seconds(floor)/seconds(sh))
		if before != "" {
			bf := median(slices.Clone(lr.before.wall))
			fmt.Fprintf(w, " %s | %.2f (%s) | %s |", cell(lr.before.wall), seconds(bf)/seconds(sh),
				ratioSpread(lr.before.wall, lr.shell.wall), ms(median(slices.Clone(lr.before.cpu))))
		}
		fmt.Fprintln(w)
	}
	growth := func(get func(launchRuns) []time.Duration) (float64, bool) {
		var lo, hi time.Duration
		for _, lr := range runs {
			switch lr.n {
			case 256:
				lo = median(slices.Clone(get(lr)))
			case 1024:
				hi = median(slices.Clone(get(lr)))
			}
		}
		return seconds(hi) / seconds(lo), lo > 0 && hi > 0
	}
	tg, ok := growth(func(lr launchRuns) []time.Duration { return lr.tpurun.wall })
	sg, _ := growth(func(lr launchRuns) []time.Duration { return lr.shell.wall })
	if ok {
		fmt.Fprintf(w, "\ngrowth N=256 → 1024: tpurun × %.2f, sh × %.2f", tg, sg)
		if before != "" {
			bg, _ := growth(func(lr launchRuns) []time.Duration { return lr.before.wall })
			fmt.Fprintf(w, ", before × %.2f", bg)
		}
		fmt.Fprintln(w)
	}
}

// cpuOf is the user + system time of a finished command and of the children it reaped.
func cpuOf(st *os.ProcessState) time.Duration {
	if st == nil {
		return 0
	}
	ru, ok := st.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
