package main

import (
	"bufio"
	"bytes"
	"cmp"
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
	}{{"output", measureOutput}, {"results", measureResults}, {"spawn", measureSpawn}, {"rendezvous", nil}} {
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
		baseline: fmt.Sprintf("pipe to cat: %.0f MB/s", mbps(base.wall)), ratio: ratio, target: "≥ 0.8", pass: ratio >= 0.8,
		note: "includes process start; payload checked as JSON by the collector",
	}, nil
}

// benchLine matches a Go benchmark result line: name, iterations, ns/op, and the metrics that follow.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(.*)$`)

// noFailures matches the metrics of a held world that lost no node ("0 failures/op", not "10 failures/op").
var noFailures = regexp.MustCompile(`(^|\s)0 failures/op\b`)

// rendezvousBench is one rendezvous benchmark make bench records: all its nodes simulated in one process, through
// the public API (rendezvous/bench_test.go). target 0: measured, held to nothing.
type rendezvousBench struct {
	bench, name string
	target      time.Duration
	held        bool // a world held for a minute: its figure is the formation and the hold, and it passes when no node was lost
}

// rendezvousBenches are the rows, with issue 36's targets (tcp and static 1024 nodes <= 1 s, 4096 <= 5 s to form
// the world: the join and one barrier; a world of 4096 held 60 s with a 2 s heartbeat losing no node).
var rendezvousBenches = []rendezvousBench{
	{bench: "BenchmarkRendezvous256TCP", name: "rendezvous of 256 nodes, tcp (CPU/GPU hosts)", target: time.Second},
	{bench: "BenchmarkRendezvous1024TCP", name: "rendezvous of 1024 nodes, tcp (CPU/GPU hosts)", target: time.Second},
	{bench: "BenchmarkRendezvous4096TCP", name: "rendezvous of 4096 nodes, tcp (CPU/GPU hosts)", target: 5 * time.Second},
	{bench: "BenchmarkRendezvous1024TPUTCP", name: "rendezvous of 1024 TPU hosts of one slice, tcp (each share names the slice)"},
	{bench: "BenchmarkRendezvous1024Static", name: "rendezvous of 1024 TPU hosts, static, named by a host list", target: time.Second},
	{bench: "BenchmarkRendezvous4096Static", name: "rendezvous of 4096 TPU hosts, static, named by a host list", target: 5 * time.Second},
	{bench: "BenchmarkRendezvousHeld4096Static", name: "world of 4096 static nodes held 60 s, heartbeat 2 s", held: true},
	{bench: "BenchmarkRendezvous256Etcd", name: "rendezvous of 256 nodes, etcd", target: 3 * time.Second},
	{bench: "BenchmarkRendezvous1024Etcd", name: "rendezvous of 1024 nodes, etcd", target: 10 * time.Second},
	{bench: "BenchmarkRendezvousHeld1024Etcd", name: "world of 1024 etcd nodes held 60 s, heartbeat 2 s", held: true},
	// issue 46: the pods users run, each node's Member as tpurun fills it (rendezvous.Self), a 2 s heartbeat
	// (rendezvous/pods_bench_test.go)
	{bench: "BenchmarkRendezvousPodGPU4096", name: "pod: 4096 GPU hosts, tcp, tpurun's Member, heartbeat 2 s", target: 5 * time.Second},
	{bench: "BenchmarkRendezvousPodSlices64x64", name: "pod: 64 slices x 64 TPU hosts (4096), static, heartbeat 2 s", target: 5 * time.Second},
	{bench: "BenchmarkRendezvousPodHeldSlices64x64", name: "pod: 64 slices x 64 TPU hosts held 60 s, heartbeat 2 s", held: true},
	{bench: "BenchmarkRendezvousPodV5pStatic", name: "pod: full v5p pod, 2240 hosts in one slice, static (TPU default)", target: 5 * time.Second},
	{bench: "BenchmarkRendezvousPodV5pTCP", name: "pod: full v5p pod, 2240 hosts in one slice, tcp", target: 5 * time.Second},
	{bench: "BenchmarkRendezvousPodEtcdServer1024", name: "pod: 1024 CPU hosts on Debian's etcd-server (its own process)", target: 10 * time.Second},
	{bench: "BenchmarkRendezvousPodHeldEtcdServer1024", name: "pod: 1024 hosts on Debian's etcd-server held 60 s, heartbeat 2 s", held: true},
	{bench: "BenchmarkRendezvousPodSlices256x64", name: "pod: moonshot, 256 slices x 64 TPU hosts (16,384), static, node 0 a process of its own", target: 15 * time.Second},
}

// benchResult is one benchmark's runs: the time of each (one rendezvous each) and its other metrics (the last
// run's: refused connections, dropped SYNs, failures).
type benchResult struct {
	runs    []time.Duration
	metrics string
}

// goBench runs the rendezvous benchmarks matching pattern, count times one iteration each, and returns each
// one's runs.
func goBench(pattern string, count int) (map[string]*benchResult, string, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", pattern, "-benchtime", "1x", "-count", strconv.Itoa(count),
		"-timeout", "60m", "./rendezvous")
	out, err := cmd.CombinedOutput()
	got := map[string]*benchResult{}
	for _, l := range strings.Split(string(out), "\n") {
		if m := benchLine.FindStringSubmatch(l); m != nil {
			ns, _ := strconv.ParseFloat(m[2], 64)
			r := got[m[1]]
			if r == nil {
				r = &benchResult{}
				got[m[1]] = r
			}
			r.runs = append(r.runs, time.Duration(ns))
			r.metrics = strings.Join(strings.Fields(m[3]), " ")
		}
	}
	return got, string(out), err
}

// measureRendezvous runs the rendezvous package's benchmarks: the formation of worlds of 256 to 4096 nodes on the
// embedded server (tcp, static) and on a real etcd, each the median of several runs against its target, and a
// world of 4096 held for a minute.
func measureRendezvous(cfg *config) []row {
	var rows []row
	for _, rb := range rendezvousBenches {
		if cfg.rows != nil && !cfg.rows.MatchString(rb.bench) {
			continue
		}
		// One go test process per benchmark: a world of 4096 nodes leaves its sockets and its heap behind, which the
		// next benchmark in the same process would pay for (1024 static nodes: 0.25 s alone, 1 s after the 4096s).
		count := max(3, cfg.runs/2)
		if rb.held {
			count = 1
		}
		got, out, err := goBench("^"+rb.bench+"$", count)
		res, ok := got[rb.bench]
		r := row{name: rb.name, baseline: "-", target: "measured"}
		switch {
		case rb.held:
			r.target = "no node lost"
		case rb.target > 0:
			r.target = "≤ " + rb.target.String()
		}
		if !ok {
			r.note = "not measured: " + oneLine(fmt.Errorf("%v %s", err, lastLines(out, 3)))
			rows = append(rows, r)
			continue
		}
		d := median(slices.Clone(res.runs))
		r.figure, r.note = ms(d), fmt.Sprintf("median of %d runs (go test -bench, one rendezvous each); last run: %s", len(res.runs), cmp.Or(res.metrics, "-"))
		switch {
		case rb.held:
			r.pass = noFailures.MatchString(res.metrics)
			r.note = "formation and hold: " + res.metrics
		case rb.target > 0:
			r.ratio, r.pass = d.Seconds()/rb.target.Seconds(), d <= rb.target
		default:
			r.pass = true
		}
		rows = append(rows, r)
	}
	return rows
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
