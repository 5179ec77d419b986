package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sample is one timed run of a command.
type sample struct {
	wall   time.Duration
	cpu    time.Duration // user + system, of the process and its waited-for descendants
	maxRSS int64         // KiB, from wait4: the largest of the process and its waited-for descendants
}

// run starts argv, feeds its stdout to sink (nil: discarded), waits, and fails unless it exits 0.
func run(argv []string, env []string, sink io.Writer) (sample, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = sink
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	s := sample{wall: time.Since(start), cpu: cpuOf(cmd.ProcessState)}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		s.maxRSS = ru.Maxrss
	}
	if err != nil {
		tail := stderr.String()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return s, fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, tail)
	}
	return s, nil
}

// repeat runs f n times and returns the median wall time and median max RSS.
func repeat(n int, f func() (sample, error)) (sample, error) {
	var walls []time.Duration
	var rss []int64
	for i := 0; i < n; i++ {
		s, err := f()
		if err != nil {
			return sample{}, err
		}
		walls = append(walls, s.wall)
		rss = append(rss, s.maxRSS)
	}
	slices.Sort(walls)
	slices.Sort(rss)
	return sample{wall: walls[n/2], maxRSS: rss[n/2]}, nil
}

// launchPoint is one N of the launch chart.
type launchPoint struct {
	n                       int
	tpurun, shell, torchrun time.Duration
	tpurunRSS               int64
}

func measureAll(cfg *config) ([]row, []launchPoint, error) {
	var rows []row
	runs, err := measureLaunch(cfg, launchNs, "")
	if err != nil {
		return nil, nil, err
	}
	points := launchPoints(runs)
	if cfg.torchrun != "" {
		for i, p := range points {
			if p.n > 256 { // minutes per run: the chart shows it up to 256
				continue
			}
			tr, err := repeat(max(3, cfg.runs/2), func() (sample, error) {
				return run(torchrunArgs(cfg, p.n, "--no_python", "/bin/true"), nil, nil)
			})
			if err != nil {
				return nil, nil, err
			}
			points[i].torchrun = tr.wall
		}
	}
	rows = append(rows, launchRows(runs)...)
	for _, p := range points {
		if p.n == 8 || p.n == 256 {
			mib := float64(p.tpurunRSS) / 1024
			rows = append(rows, row{
				name: fmt.Sprintf("launcher peak RSS, N=%d", p.n), figure: fmt.Sprintf("%.1f MiB", mib), baseline: "-",
				target: "≤ 40 MiB", pass: mib <= 40, note: "max RSS from wait4 (launcher or a /bin/true child)",
			})
		}
	}
	trRows, err := measureTorchrun(cfg, points)
	if err != nil {
		trRows = append(trRows, row{name: "vs torchrun", target: "measured", note: "failed: " + oneLine(err)})
	}
	rows = append(rows, trRows...)
	for _, ignore := range []bool{false, true} {
		r, err := measureTeardown(cfg, ignore)
		if err != nil {
			r = row{name: "teardown", target: "measured", note: "failed: " + oneLine(err)}
		}
		rows = append(rows, r)
	}
	for _, m := range []struct {
		name string
		f    func(*config) (row, error)
	}{{"output", measureOutput}, {"results", measureResults}, {"rendezvous", nil}} {
		if m.f == nil {
			rows = append(rows, measureRendezvous(cfg)...)
			continue
		}
		r, err := m.f(cfg)
		if err != nil {
			r = row{name: m.name, target: "measured", note: "failed: " + oneLine(err)}
		}
		rows = append(rows, r)
	}
	return append(rows, preloadRowsOrFailure(cfg)...), points, nil
}

func torchrunArgs(cfg *config, n int, rest ...string) []string {
	args := []string{cfg.torchrun, "--standalone", "--nproc_per_node", strconv.Itoa(n),
		"--redirects", "9:1", "--tee", "9:1", "--monitor_interval", "0.01"}
	return append(args, rest...)
}

func measureTorchrun(cfg *config, points []launchPoint) ([]row, error) {
	if cfg.torchrun == "" {
		return []row{{name: "vs torchrun", target: "measured", note: "torchrun not given"}}, nil
	}
	var rows []row
	for _, p := range points {
		if p.n == 8 {
			ratio := seconds(p.torchrun) / seconds(p.tpurun)
			rows = append(rows, row{
				name: "8 × /bin/true, torchrun ÷ tpurun", figure: ms(p.tpurun), baseline: "torchrun: " + ms(p.torchrun),
				ratio: ratio, target: "≥ 50 (tpurun faster)", pass: ratio >= 50,
			})
		}
	}
	script, err := filepath.Abs("examples/torch_allreduce.py")
	if err != nil {
		return nil, err
	}
	tp, err := repeat(max(3, cfg.runs/2), func() (sample, error) {
		return run([]string{cfg.tpurun, "--nprocs", "4", "--", cfg.python, "-u", script}, nil, nil)
	})
	if err != nil {
		return nil, err
	}
	tr, err := repeat(max(3, cfg.runs/2), func() (sample, error) {
		return run(torchrunArgs(cfg, 4, script), []string{"PYTHON_EXEC=" + cfg.python}, nil)
	})
	if err != nil {
		return nil, err
	}
	ratio := seconds(tp.wall) / seconds(tr.wall)
	rows = append(rows, row{
		name: "4-worker gloo all_reduce, tpurun ÷ torchrun", figure: ms(tp.wall), baseline: "torchrun: " + ms(tr.wall),
		ratio: ratio, target: "≤ 1.0 (not slower)", pass: ratio <= 1.0,
	})
	return rows, nil
}

// measureTeardown times, for 8 workers, the moment rank 0 SIGKILLs itself to the moment tpurun has exited: an
// upper bound on "every other worker gone", since tpurun exits only after reaping them all.
func measureTeardown(cfg *config, ignoreTerm bool) (row, error) {
	grace := 2 * time.Second
	name := "teardown after SIGKILL of 1 of 8, beyond grace"
	extra := []string{}
	if ignoreTerm {
		grace = 200 * time.Millisecond
		name = "teardown, workers ignore SIGTERM, beyond grace"
		extra = []string{"ignore"}
	}
	var lat []time.Duration
	for i := 0; i < cfg.runs; i++ {
		dir, err := os.MkdirTemp("", "tpurun-bench-teardown")
		if err != nil {
			return row{}, err
		}
		argv := append([]string{cfg.tpurun, "--nprocs", "8", "--grace", grace.String(), "--",
			cfg.self, "worker", "teardown", dir, "8"}, extra...)
		cmd := exec.Command(argv[0], argv[1:]...)
		if err := cmd.Run(); err == nil {
			os.RemoveAll(dir)
			return row{}, errors.New("teardown run exited 0; want the killed worker's code")
		}
		end := time.Now()
		stamp, err := os.ReadFile(filepath.Join(dir, "killed"))
		os.RemoveAll(dir)
		if err != nil {
			return row{}, fmt.Errorf("teardown: rank 0 never killed itself: %w", err)
		}
		ns, _ := strconv.ParseInt(string(stamp), 10, 64)
		d := end.Sub(time.Unix(0, ns))
		if ignoreTerm {
			d -= grace
		}
		lat = append(lat, d)
	}
	slices.Sort(lat)
	med := lat[len(lat)/2]
	return row{
		name: name, figure: ms(med), baseline: "grace " + grace.String(), target: "≤ 50 ms", pass: med <= 50*time.Millisecond,
		note: "kill → tpurun exited (all reaped)",
	}, nil
}

// lineRE matches one forwarded line: an optional rank prefix, then "<rank> <seq> <body>".
var lineRE = regexp.MustCompile(`^(?:\[[^\]]*\] ?)?(\d+) (\d+) (.*)$`)

// lineCounter checks every forwarded line: per rank consecutive sequence numbers and an intact body.
type lineCounter struct {
	next       map[string]int
	bad, lines int
}

func countLines(r io.Reader) *lineCounter {
	c := &lineCounter{next: map[string]int{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := lineRE.FindSubmatch(sc.Bytes())
		if m == nil || string(m[3]) != lineBody {
			c.bad++
			continue
		}
		seq, _ := strconv.Atoi(string(m[2]))
		if seq != c.next[string(m[1])] {
			c.bad++
		}
		c.next[string(m[1])] = seq + 1
		c.lines++
	}
	return c
}

func measureOutput(cfg *config) (row, error) {
	per := int64(50_000_000)
	if cfg.quick {
		per = 5_000_000
	}
	total := 8 * per
	var want int
	for seq, n := 0, int64(0); n < per; seq++ {
		n += int64(len(fmt.Sprintf("0 %d %s\n", seq, lineBody)))
		want++
	}
	// One untimed run checks every line; the timed runs of tpurun and of the baseline feed the same sink.
	pr, pw := io.Pipe()
	done := make(chan *lineCounter)
	go func() { done <- countLines(pr) }()
	_, err := run([]string{cfg.tpurun, "--nprocs", "8", "--", cfg.self, "worker", "lines", strconv.FormatInt(per, 10)}, nil, pw)
	pw.Close()
	c := <-done
	if err != nil {
		return row{}, err
	}
	lost := c.bad + 8*want - c.lines
	tp, err := repeat(max(3, cfg.runs/2), func() (sample, error) {
		return run([]string{cfg.tpurun, "--nprocs", "8", "--", cfg.self, "worker", "lines", strconv.FormatInt(per, 10)}, nil, io.Discard)
	})
	if err != nil {
		return row{}, err
	}
	base, err := repeat(max(3, cfg.runs/2), func() (sample, error) {
		script := fmt.Sprintf(`for r in 0 1 2 3 4 5 6 7; do RANK=$r "%s" worker lines %d & done | cat; wait`, cfg.self, per)
		return run([]string{"/bin/bash", "-c", script}, nil, io.Discard)
	})
	if err != nil {
		return row{}, err
	}
	mbps := func(d time.Duration) float64 { return float64(total) / 1e6 / seconds(d) }
	ratio := mbps(tp.wall) / mbps(base.wall)
	return row{
		name: fmt.Sprintf("output 8 × %d MB of lines", per/1_000_000), figure: fmt.Sprintf("%.0f MB/s", mbps(tp.wall)),
		baseline: fmt.Sprintf("cat pipe: %.0f MB/s", mbps(base.wall)), ratio: ratio, target: "≥ 0.5, 0 lines lost/split",
		pass: ratio >= 0.5 && lost == 0, note: fmt.Sprintf("%d lines lost or split", lost),
	}, nil
}

// measureResults sends 8 × 32 MiB of results through tpurun's result channels, against 8 plain pipes carrying the
// same bytes to cat.
func measureResults(cfg *config) (row, error) {
	per := int64(32 << 20)
	if cfg.quick {
		per = 4 << 20
	}
	n := strconv.FormatInt(per, 10)
	tp, err := repeat(max(3, cfg.runs/2), func() (sample, error) {
		return run([]string{cfg.tpurun, "--expect-results", "--nprocs", "8", "--", cfg.self, "worker", "result", n}, nil, nil)
	})
	if err != nil {
		return row{}, err
	}
	base, err := repeat(max(3, cfg.runs/2), func() (sample, error) {
		script := fmt.Sprintf(`for r in 0 1 2 3 4 5 6 7; do ("%s" worker raw %s | cat > /dev/null) & done; wait`, cfg.self, n)
		return run([]string{"/bin/bash", "-c", script}, nil, nil)
	})
	if err != nil {
		return row{}, err
	}
	mbps := func(d time.Duration) float64 { return float64(8*per) / 1e6 / seconds(d) }
	ratio := mbps(tp.wall) / mbps(base.wall)
	return row{
		name: fmt.Sprintf("results 8 × %d MiB", per>>20), figure: fmt.Sprintf("%.0f MB/s", mbps(tp.wall)),
		baseline: fmt.Sprintf("pipe to cat: %.0f MB/s", mbps(base.wall)), ratio: ratio, target: "≥ 0.5", pass: ratio >= 0.5,
		note: "includes process start; payload checked as JSON by the collector",
	}, nil
}

// benchLine matches a Go benchmark result line: name, iterations, ns/op, and what follows (the reported metrics).
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(.*)`)

// lostMetric is the held world's metric: the nodes that heard of a failure.
var lostMetric = regexp.MustCompile(`\s([\d.]+) lost\b`)

// rendezvousRows are the sizes measured: the world that N nodes simulated in one process form (New, Join and a
// barrier on every node), on the embedded server and on a real etcd, each against its target (issue 36: etcd
// 1024 nodes <= 10 s).
var rendezvousRows = []struct {
	bench, name string
	target      time.Duration
}{
	{"BenchmarkRendezvous256TCP", "rendezvous of 256 nodes, TCP", time.Second},
	{"BenchmarkRendezvous256Etcd", "rendezvous of 256 nodes, Etcd", 3 * time.Second},
	{"BenchmarkRendezvous1024Etcd", "rendezvous of 1024 nodes, Etcd", 10 * time.Second},
}

// heldBench holds a world of 1024 nodes on etcd for a minute with a 2 s heartbeat: it passes when no node hears of
// a failure (RDZV_BENCH_HOLD shortens the hold under -quick).
const heldBench = "BenchmarkRendezvousHeld1024Etcd"

// goBench runs the rendezvous package's benchmarks named (whole names), each once per run, runs times; it returns
// each benchmark's results (ns/op and the rest of its line) and the output.
func goBench(names []string, runs int, env ...string) (map[string][]string, string, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^("+strings.Join(names, "|")+")$", "-benchtime", "1x",
		"-count", strconv.Itoa(runs), "-timeout", "60m", "./rendezvous")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	got := map[string][]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if m := benchLine.FindStringSubmatch(l); m != nil {
			got[m[1]] = append(got[m[1]], m[2]+m[3])
		}
	}
	return got, string(out), err
}

// measureRendezvous runs the rendezvous package's pod-scale benchmarks: one row per size (the median of runs,
// each a world formed from scratch; ratio against the target) and the held world's row (pass or fail).
func measureRendezvous(cfg *config) []row {
	var names []string
	for _, r := range rendezvousRows {
		names = append(names, r.bench)
	}
	runs := max(3, cfg.runs/2)
	got, out, err := goBench(names, runs)
	var rows []row
	for _, rr := range rendezvousRows {
		r := row{name: rr.name, target: "≤ " + rr.target.String(), baseline: "-"}
		var ds []time.Duration
		for _, res := range got[rr.bench] {
			ns, _ := strconv.ParseFloat(strings.Fields(res)[0], 64)
			ds = append(ds, time.Duration(ns))
		}
		if len(ds) == 0 {
			r.note = "not measured: " + oneLine(fmt.Errorf("%v %s", err, lastLines(out, 3)))
		} else {
			slices.Sort(ds)
			d := ds[len(ds)/2]
			r.figure, r.ratio, r.pass = fmt.Sprintf("%.2f s", d.Seconds()), d.Seconds()/rr.target.Seconds(), d <= rr.target
			r.note = fmt.Sprintf("median of %d worlds formed (join and a barrier; go test -bench); range %.2f-%.2f s; ratio against the target",
				len(ds), ds[0].Seconds(), ds[len(ds)-1].Seconds())
		}
		rows = append(rows, r)
	}
	return append(rows, measureHeld(cfg))
}

// measureHeld is the held world's row: pass when no node of it heard of a failure in the minute held.
func measureHeld(cfg *config) row {
	var env []string
	hold := "60 s"
	if cfg.quick {
		env, hold = append(env, "RDZV_BENCH_HOLD=5s"), "5 s"
	}
	r := row{name: "world of 1024 nodes held " + hold + " (heartbeat 2 s), Etcd", target: "0 nodes lost", baseline: "-"}
	got, out, err := goBench([]string{heldBench}, 1, env...)
	res := got[heldBench]
	var lost []string
	if len(res) > 0 {
		lost = lostMetric.FindStringSubmatch(res[0])
	}
	switch {
	case lost != nil && lost[1] == "0" && err == nil:
		ns, _ := strconv.ParseFloat(strings.Fields(res[0])[0], 64)
		r.figure, r.pass = "0 lost", true
		r.note = fmt.Sprintf("formed in %.2f s, then held; pass/fail", time.Duration(ns).Seconds())
	case strings.Contains(out, "heard of a failure"):
		r.figure = "nodes lost"
		r.note = oneLine(errors.New(lastLines(out, 3)))
	default:
		r.note = "not measured: " + oneLine(fmt.Errorf("%v %s", err, lastLines(out, 3)))
	}
	return r
}

func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strings.ReplaceAll(s, "|", "/")
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], " ")
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
