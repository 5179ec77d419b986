// Command tpurun-bench measures tpurun against baselines taken in the same run on the same machine: a shell that
// starts N background processes, plain pipes, and Debian's torchrun. It writes a markdown table and an SVG chart
// (`make bench`). Every figure is the median of several runs and is reported as a ratio against its baseline.
//
// The same binary is also the benchmark's worker program: `tpurun-bench worker MODE ...` (see worker.go).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(runWorker(os.Args[2:]))
	}
	var cfg config
	flag.StringVar(&cfg.tpurun, "tpurun", "bin/tpurun", "the tpurun binary to measure")
	flag.StringVar(&cfg.torchrun, "torchrun", "torchrun", "the torchrun to compare with (empty: skip, reported as MISS)")
	flag.StringVar(&cfg.python, "python", "/usr/bin/python3", "the Python with torch, for the all_reduce job")
	flag.StringVar(&cfg.out, "out", "docs/BENCHMARKS.md", "markdown report")
	flag.StringVar(&cfg.svg, "svg", "docs/launch.svg", "SVG chart of launch time against N")
	flag.StringVar(&cfg.pymodule, "pymodule", "worker/python", "the directory holding the tpurun Python module, for the spawn row")
	flag.IntVar(&cfg.runs, "runs", 7, "runs per figure (the median is reported)")
	flag.BoolVar(&cfg.quick, "quick", false, "fewer runs and smaller payloads (a smoke test of the harness)")
	only := flag.String("only", "", "run only these rows and print them, writing no file: preload, launch, rendezvous, output, results, spawn")
	before := flag.String("before", "", "with -only launch: an older tpurun binary, measured in the same runs for comparison")
	rowsRE := flag.String("rows", "", "with -only rendezvous: run only the rows whose benchmark matches this regular expression (Pod: issue 46's pods)")
	flag.Parse()
	if *rowsRE != "" {
		re, err := regexp.Compile(*rowsRE)
		if err != nil {
			fmt.Fprintln(os.Stderr, "tpurun-bench: -rows:", err)
			os.Exit(2)
		}
		cfg.rows = re
	}
	if cfg.quick {
		cfg.runs = 3
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tpurun-bench:", err)
		os.Exit(1)
	}
	cfg.self = self
	if cfg.tpurun, err = filepath.Abs(cfg.tpurun); err != nil {
		fmt.Fprintln(os.Stderr, "tpurun-bench:", err)
		os.Exit(1)
	}
	if cfg.pymodule, err = filepath.Abs(cfg.pymodule); err != nil {
		fmt.Fprintln(os.Stderr, "tpurun-bench:", err)
		os.Exit(1)
	}
	if *only != "" {
		if err := runOnly(&cfg, *only, *before); err != nil {
			fmt.Fprintln(os.Stderr, "tpurun-bench:", err)
			os.Exit(1)
		}
		return
	}
	rows, launch, err := measureAll(&cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tpurun-bench:", err)
		os.Exit(1)
	}
	report := renderMarkdown(rows, cfg)
	fmt.Print(report)
	if err := write(cfg, report, renderSVG(launch)); err != nil {
		fmt.Fprintln(os.Stderr, "tpurun-bench:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "wrote %s and %s\n", cfg.out, cfg.svg)
}

// runOnly measures only the rows of -only and prints them, writing no file.
func runOnly(cfg *config, only, before string) error {
	switch only {
	case "launch":
		if before != "" {
			var err error
			if before, err = filepath.Abs(before); err != nil {
				return err
			}
		}
		runs, err := measureLaunch(cfg, launchNs, before)
		if err != nil {
			return err
		}
		renderLaunch(os.Stdout, runs, *cfg, before)
	case "rendezvous":
		fmt.Print(renderMarkdown(measureRendezvous(cfg), *cfg))
	case "output":
		r, err := measureOutput(cfg)
		if err != nil {
			return err
		}
		fmt.Print(renderMarkdown([]row{r}, *cfg))
	case "results":
		r, err := measureResults(cfg)
		if err != nil {
			return err
		}
		fmt.Print(renderMarkdown([]row{r}, *cfg))
	case "spawn":
		r, err := measureSpawn(cfg)
		if err != nil {
			return err
		}
		fmt.Print(renderMarkdown([]row{r}, *cfg))
	case "preload":
		rows, err := measurePreload(cfg)
		fmt.Print(renderMarkdown(rows, *cfg))
		return err
	default:
		return fmt.Errorf("-only %q: want preload, launch, rendezvous, output, results or spawn", only)
	}
	return nil
}

// write writes the report to cfg.out, after it the old report's part measured by hand (keepByHand), and the chart
// to cfg.svg.
func write(cfg config, report, svg string) error {
	if old, err := os.ReadFile(cfg.out); err == nil {
		report = keepByHand(report, string(old))
	}
	if err := os.WriteFile(cfg.out, []byte(report), 0o644); err != nil {
		return err
	}
	return os.WriteFile(cfg.svg, []byte(svg), 0o644)
}

type config struct {
	self, tpurun, torchrun, python string
	pymodule                       string // the directory holding the tpurun Python module (for tpurun.spawn)
	out, svg                       string
	runs                           int
	quick                          bool
	rows                           *regexp.Regexp // -rows: the rendezvous rows to run (nil: all)
}

// row is one line of the report: a figure, its baseline, their ratio and the target it is held to.
type row struct {
	name     string
	figure   string
	baseline string
	ratio    float64
	target   string
	pass     bool
	note     string
}

// byHand marks where the part of the report measured by hand begins (-only rows, another host's figures): a new
// report keeps what follows it in the old one.
const byHand = "<!-- Measured by hand from here on: make bench rewrites what is above and keeps what follows. -->"

// keepByHand is report followed by the part of old from its byHand line on; report alone when old has none.
func keepByHand(report, old string) string {
	i := strings.Index(old, byHand)
	if i < 0 {
		return report
	}
	return report + "\n" + old[i:]
}

func renderMarkdown(rows []row, cfg config) string {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# tpurun benchmarks\n\nMeasured by `make bench` on %s, %s, %d runs per figure (median).\n",
		host, time.Now().UTC().Format("2006-01-02 15:04 MST"), cfg.runs)
	b.WriteString("Ratios compare tpurun with a baseline measured in the same run on the same machine.\n\n")
	b.WriteString("| measure | tpurun | baseline | ratio | target | verdict | note |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		verdict := "MISS"
		if r.pass {
			verdict = "PASS"
		}
		ratio := "-"
		if r.ratio > 0 {
			ratio = fmt.Sprintf("%.2f", r.ratio)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", r.name, r.figure, r.baseline, ratio, r.target, verdict, r.note)
	}
	b.WriteString("\n![launch time against N](launch.svg)\n\n")
	b.WriteString("torchrun is Debian's (python3-torch 1.13) on Python 3.11, run with `--redirects 9:1 --tee 9:1` (its " +
		"defaults crash there; see the README's \"torchrun compatibility\") and `--monitor_interval 0.01`, its fastest " +
		"useful setting.\n")
	return b.String()
}
