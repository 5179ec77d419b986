// Package cli owns tpurun's command line below cmd/tpurun's main: it reads a command line the way torchrun's
// argparse reads it (a long flag may be shortened to any unique prefix of one of torchrun's flags, '_' spells '-',
// every flag not given takes its value from torchrun's PET_<FLAG> variable, a duration may be given in torchrun's
// plain seconds, a mistyped flag gets the nearest flag as a suggestion: Expand before parsing, ApplyPET after);
// it registers the flags that tpurun's commands share (run, plan and doctor) — which devices to use and how to
// split them, in tpurun's and torchrun's spellings — and turns them into what detection and planning take
// (topology.Options, topology.Request); and it parses the values of the other flags (the Python command line,
// node counts, stream selectors, rank lists, signal and module lists) into what a spec.Spec takes. Each flag
// that sets a setting (a failure.Setting) is bound to it where the flag is defined (Bind), so that an error about
// the setting names the flag (FlagOf). Detection is the launcher's, once per run or dry run
// (launcher.Plan, for `tpurun plan`).
package cli

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/topology"
	"tpurun/rendezvous"
)

// settingKey is the annotation of a flag that lists the settings it sets (Bind).
const settingKey = "tpurun/setting"

// Bind says, beside the flag's definition, that the flag name of fs sets the settings ss: a configuration error
// about one of them names the flag (FlagOf). A flag may set several settings (--nnodes: the job's node count and
// the rendezvous's); a name that is not a flag of fs is a mistake of the program, and panics.
func Bind(fs *pflag.FlagSet, name string, ss ...failure.Setting) {
	f := fs.Lookup(name)
	if f == nil {
		panic("cli.Bind: no flag --" + name)
	}
	bound := f.Annotations[settingKey]
	for _, s := range ss {
		bound = append(bound, string(s))
	}
	if err := fs.SetAnnotation(name, settingKey, bound); err != nil {
		panic(err)
	}
}

// FlagOf names the flag of fs bound to s ("--grace"), "" when none is (or fs is nil).
func FlagOf(fs *pflag.FlagSet, s failure.Setting) string {
	if fs == nil || s == "" {
		return ""
	}
	name := ""
	fs.VisitAll(func(f *pflag.Flag) {
		if name == "" && slices.Contains(f.Annotations[settingKey], string(s)) {
			name = "--" + f.Name
		}
	})
	return name
}

// Bound lists, for every flag of fs that Bind bound to settings, the settings it sets: its name without dashes and
// the settings' names.
func Bound(fs *pflag.FlagSet) map[string][]string {
	out := map[string][]string{}
	fs.VisitAll(func(f *pflag.Flag) {
		if ss := f.Annotations[settingKey]; len(ss) > 0 {
			out[f.Name] = ss
		}
	})
	return out
}

// ParseNProcs parses a --nprocs / --nproc-per-node value: a whole number from 1, or (only for --nproc-per-node,
// as torchrun) auto, cpu, gpu or tpu.
func ParseNProcs(flag, s string) (n int, device string, err error) {
	v := strings.ToLower(strings.TrimSpace(s))
	words := nprocsWords()
	if slices.Contains(words, v) {
		if flag == "nprocs" {
			return 0, "", fmt.Errorf("--%s takes a number of processes; %q is a device word that only --nproc-per-node takes (or use --device %s)", flag, s, v)
		}
		return 0, v, nil
	}
	n, err = strconv.Atoi(v)
	if err != nil || n < 1 || v != strconv.Itoa(n) {
		choices := "a whole number from 1"
		if flag != "nprocs" {
			choices += ", " + strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
		}
		return 0, "", fmt.Errorf("need %s, or leave --%s unset for one process per device", choices, flag)
	}
	if n > 65536 {
		return 0, "", fmt.Errorf("%d processes is more than tpurun starts on one host (65536)", n)
	}
	return n, "", nil
}

// nprocsWords are torchrun's device words of --nproc-per-node: auto, then the name of every device kind.
func nprocsWords() []string {
	words := []string{"auto"}
	for _, d := range topology.Devices() {
		words = append(words, string(d))
	}
	return words
}

// ParseNNodes parses a node count: N, or torchrun's elastic MIN:MAX (min is 0 for N, or when MIN == MAX).
func ParseNNodes(v string) (min, max int, err error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, 1, nil
	}
	bad := func() (int, int, error) {
		return 0, 0, &failure.ConfigError{Field: failure.NNodes, Value: v, Hint: fmt.Sprintf("need N or MIN:MAX, whole numbers 1..%d with MIN <= MAX", rendezvous.MaxNodes)}
	}
	lo, hi, ranged := strings.Cut(v, ":")
	n, err := strconv.Atoi(lo)
	if err != nil || n < 1 || n > rendezvous.MaxNodes {
		return bad()
	}
	if !ranged {
		return 0, n, nil
	}
	m, err := strconv.Atoi(hi)
	if err != nil || m < n || m > rendezvous.MaxNodes {
		return bad()
	}
	if m == n {
		return 0, m, nil
	}
	return n, m, nil
}

// RendezvousBackends names the rendezvous backends the program links, as registered with package rendezvous (the
// launcher imports tcp and static, tpurun-etcd etcd too), for help text: "etcd (etcd-v2), static or tcp (c10d)".
func RendezvousBackends() string { return rendezvous.Names() }

// DefaultRendezvousTimeout is how long the rendezvous waits for every node when --rdzv-timeout is not given: its own
// default (rendezvous.DefaultTimeout; 0 in the Spec means it), named here for help text.
const DefaultRendezvousTimeout = rendezvous.DefaultTimeout

// ParseSignals parses torchrun's signals-to-handle list: comma-separated names (SIGTERM or TERM) or numbers.
// SIGKILL and SIGSTOP cannot be handled and are refused.
func ParseSignals(s string) ([]os.Signal, error) {
	var out []os.Signal
	for part := range strings.SplitSeq(s, ",") {
		name := strings.ToUpper(strings.TrimSpace(part))
		if name == "" {
			continue
		}
		sig := unix.SignalNum("SIG" + strings.TrimPrefix(name, "SIG"))
		if n, err := strconv.Atoi(name); err == nil && unix.SignalName(syscall.Signal(n)) != "" {
			sig = syscall.Signal(n)
		}
		if sig == 0 || sig == syscall.SIGKILL || sig == syscall.SIGSTOP {
			return nil, fmt.Errorf("%q is not a signal tpurun can handle; use names like SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2 (SIGKILL and SIGSTOP cannot be handled)", strings.TrimSpace(part))
		}
		out = append(out, sig)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("name at least one signal, e.g. SIGTERM,SIGINT")
	}
	return out, nil
}

// ParseList splits a comma-separated list (--preload, TPURUN_PRELOAD), dropping blanks: "torch, numpy" is
// [torch numpy].
func ParseList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// ParseStdSpec parses torchrun's --redirects/--tee syntax: "3", or "0:1,1:2" (local_rank:std). flag names the
// flag in errors.
func ParseStdSpec(flag, s string) (console.StdSpec, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return console.StdSpec{}, nil
	}
	if !strings.Contains(s, ":") {
		v, err := parseStd(flag, s, s)
		return console.StdSpec{All: v}, err
	}
	spec := console.StdSpec{PerRank: map[int]console.Std{}}
	for _, part := range strings.Split(s, ",") {
		r, v, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return console.StdSpec{}, &failure.ConfigError{Field: failure.Named(flag), Value: s,
				Hint: fmt.Sprintf("entry %q is not local_rank:std; write e.g. 0:1,1:3", part)}
		}
		rank, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || rank < 0 {
			return console.StdSpec{}, &failure.ConfigError{Field: failure.Named(flag), Value: s,
				Hint: fmt.Sprintf("local rank %q in %q is not a non-negative integer", r, part)}
		}
		if _, dup := spec.PerRank[rank]; dup {
			return console.StdSpec{}, &failure.ConfigError{Field: failure.Named(flag), Value: s, Hint: fmt.Sprintf("local rank %d is listed twice", rank)}
		}
		std, err := parseStd(flag, s, v)
		if err != nil {
			return console.StdSpec{}, err
		}
		spec.PerRank[rank] = std
	}
	return spec, nil
}

func parseStd(flag, whole, v string) (console.Std, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 || n > 3 {
		return 0, &failure.ConfigError{Field: failure.Named(flag), Value: whole,
			Hint: fmt.Sprintf("%q is not a stream selector; use 0 (none), 1 (stdout), 2 (stderr) or 3 (both)", v)}
	}
	return console.Std(n), nil
}

// ParseRanks parses a --local-ranks-filter value: comma-separated non-negative integers, ranges "a-b" allowed.
// The empty string means no filter (nil).
func ParseRanks(flag, s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	seen := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, &failure.ConfigError{Field: failure.Named(flag), Value: s,
				Hint: fmt.Sprintf("%q is not a rank or range; write e.g. 0,2,4-7", part)}
		}
		if b-a > 1<<16 {
			return nil, &failure.ConfigError{Field: failure.Named(flag), Value: s, Hint: fmt.Sprintf("range %q is too large", part)}
		}
		for i := a; i <= b; i++ {
			seen[i] = true
		}
	}
	out := make([]int, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	sort.Ints(out)
	return out, nil
}

// ParseStdinMode parses --stdin.
func ParseStdinMode(v string) (console.StdinMode, error) {
	switch m := console.StdinMode(v); m {
	case "", console.StdinAll:
		return console.StdinAll, nil
	case console.StdinFirst, "rank0", "first":
		return console.StdinFirst, nil
	case console.StdinNone:
		return m, nil
	}
	return "", &failure.ConfigError{Field: failure.Stdin, Value: v, Hint: "use all (every worker reads tpurun's stdin), 0 (local rank 0 only) or none (/dev/null)"}
}

// Exit prints the error a command ends with (if any) as tpurun's last line, with its exit code, and returns the
// code (failure.ExitCode). flag, when not "", is the flag bound to the setting a configuration error is about
// (FlagOf): the line names it, so that it says what to change.
func Exit(stderr io.Writer, flag string, err error) int {
	code := failure.ExitCode(err)
	if err == nil {
		return code
	}
	if flag != "" {
		fmt.Fprintf(stderr, "tpurun: %s %v (exit %d)\n", flag, err, code)
		return code
	}
	if code == failure.ExitOK { // nothing failed: a late node of a job that had finished, say
		fmt.Fprintf(stderr, "tpurun: %v\n", err)
		return code
	}
	fmt.Fprintf(stderr, "tpurun: %v (exit %d)\n", err, code)
	return code
}

// Device holds the flags that say which devices to use and how to split them: shared by the run path,
// `tpurun plan` and `tpurun doctor`.
type Device struct {
	device          string
	nprocs          nprocsState
	spmd            bool
	isolateGPUs     bool
	tpuPortBase     int
	metadataTimeout time.Duration
	acceleratorType string
	Force           bool // --force: start although another process holds a chip
	sysfsRoot       string
	devRoot         string
	procRoot        string
}

// AddDevice registers the device flags on fs; the hidden root flags point detection at a fake OS tree.
func AddDevice(fs *pflag.FlagSet) *Device {
	d := &Device{}
	fs.StringVar(&d.device, "device", "auto", "device to run on: auto (TPU > GPU > CPU), cpu, gpu or tpu")
	Bind(fs, "device", failure.Device)
	fs.Var(&nprocsFlag{st: &d.nprocs, name: "nprocs"}, "nprocs",
		"number of worker processes on this host (default: one per chip or GPU; 1 on CPU)")
	fs.Var(&nprocsFlag{st: &d.nprocs, name: "nproc-per-node"}, "nproc-per-node",
		"torchrun's spelling: a number like --nprocs, or auto (one per device), cpu (one per CPU core), gpu or tpu (one per device of that kind)")
	fs.BoolVar(&d.isolateGPUs, "isolate-gpus", false, "give each GPU worker CUDA_VISIBLE_DEVICES=<its GPU> (torchrun leaves it alone: every worker sees every GPU)")
	fs.BoolVar(&d.spmd, "spmd", false, "SPMD: one process per host that sees all local chips (XLA_USE_SPMD=1)")
	fs.IntVar(&d.tpuPortBase, "tpu-port-base", topology.DefaultTPUPortBase, "first TPU_PROCESS_PORT; local rank r gets base+r")
	fs.DurationVar(&d.metadataTimeout, "metadata-timeout", topology.DefaultMetadataBudget,
		"total time allowed for GCE metadata queries (only made when env and sysfs do not describe the TPU slice)")
	fs.StringVar(&d.acceleratorType, "accelerator-type", "", "TPU accelerator type, e.g. v4-8 or v5litepod-8 (overrides TPU_ACCELERATOR_TYPE)")
	Bind(fs, "accelerator-type", failure.AcceleratorType)
	fs.BoolVar(&d.Force, "force", false, "start even when another process holds a chip's device node open")
	fs.StringVar(&d.sysfsRoot, "sysfs-root", "", "root of sysfs (default /sys or TPURUN_SYSFS_ROOT)")
	fs.StringVar(&d.devRoot, "dev-root", "", "root of the device nodes (default /dev or TPURUN_DEV_ROOT)")
	fs.StringVar(&d.procRoot, "proc-root", "", "root of procfs (default /proc or TPURUN_PROC_ROOT)")
	for _, name := range []string{"sysfs-root", "dev-root", "proc-root"} {
		_ = fs.MarkHidden(name)
	}
	return d
}

// nprocsState is what --nprocs / --nproc-per-node said: a count (0 = unset: one per device) or a device word.
type nprocsState struct {
	n      int
	device string // "auto", "cpu", "gpu" or "tpu" from --nproc-per-node; "" for a count
	flag   string // the flag that set it last; "" when unset
}

// nprocsFlag is one spelling of the nprocs flag; both spellings share one nprocsState (the last one given wins).
type nprocsFlag struct {
	st   *nprocsState
	name string
}

func (f *nprocsFlag) Set(s string) error {
	n, dev, err := ParseNProcs(f.name, s)
	if err != nil {
		return err
	}
	*f.st = nprocsState{n: n, device: dev, flag: f.name}
	return nil
}

func (f *nprocsFlag) String() string {
	switch {
	case f.st == nil || f.st.flag == "":
		return ""
	case f.st.device != "":
		return f.st.device
	}
	return strconv.Itoa(f.st.n)
}

func (f *nprocsFlag) Type() string {
	if f.name == "nprocs" {
		return "N"
	}
	return "spec"
}

// Options turns the flags into what topology.Detect needs.
func (d *Device) Options(log *zap.Logger) (topology.Options, error) {
	dev := d.device
	if w := d.nprocs.device; w != "" && w != "auto" {
		given := strings.ToLower(strings.TrimSpace(dev))
		if named, ok := topology.DeviceNamed(given); given != "" && given != "auto" && (!ok || string(named) != w) {
			return topology.Options{}, &topology.ConfigError{Name: "--nproc-per-node", Value: w,
				Problem: "contradicts --device " + dev, Sources: []topology.Source{topology.Flag("nproc-per-node"), topology.Flag("device")},
				Choices: []string{"--nproc-per-node " + given, "--device " + w}, Hint: "or give only one of them"}
		}
		dev = w
	}
	if d.tpuPortBase < 1 || d.tpuPortBase > 65535 {
		return topology.Options{}, &topology.ConfigError{Name: "--tpu-port-base", Value: strconv.Itoa(d.tpuPortBase),
			Problem: "is not a TCP port", Sources: []topology.Source{topology.Flag("tpu-port-base")}, Hint: "use a port from 1 to 65535 (default 8476)"}
	}
	if d.metadataTimeout <= 0 {
		return topology.Options{}, &topology.ConfigError{Name: "--metadata-timeout", Value: d.metadataTimeout.String(),
			Problem: "must be positive", Sources: []topology.Source{topology.Flag("metadata-timeout")}, Hint: "e.g. 3s"}
	}
	opts := topology.Options{
		Device:          dev,
		AcceleratorType: d.acceleratorType,
		SPMD:            d.spmd,
		MetadataBudget:  d.metadataTimeout,
		Logger:          log,
	}
	// Device nodes are matched against /proc/*/fd links, which are absolute: every root is made absolute (an
	// unset one is read by detection from TPURUN_<NAME>_ROOT).
	roots := []*string{&opts.SysfsRoot, &opts.DevRoot, &opts.ProcRoot}
	for i, r := range []struct{ flag, env string }{{d.sysfsRoot, "TPURUN_SYSFS_ROOT"}, {d.devRoot, "TPURUN_DEV_ROOT"}, {d.procRoot, "TPURUN_PROC_ROOT"}} {
		if p := cmp.Or(r.flag, os.Getenv(r.env)); p != "" {
			*roots[i], _ = filepath.Abs(p)
		}
	}
	return opts, nil
}

// Request turns the flags into the plan request; perCPU is torchrun's "cpu" (and "auto" on a host without
// accelerators): one process per CPU core.
func (d *Device) Request() (req topology.Request, perCPU bool) {
	req = topology.Request{NProcs: d.nprocs.n, SPMD: d.spmd, TPUPortBase: d.tpuPortBase, IsolateGPUs: d.isolateGPUs}
	if d.nprocs.flag != "" {
		req.NProcsSource = topology.Flag(d.nprocs.flag)
	}
	w := d.nprocs.device // auto, on a host without accelerators, is one worker per core too
	return req, w == "auto" || (w != "" && topology.Device(w).Kind().PerCore())
}

// Dashes lets every flag be spelled with '_' for '-', as torchrun's (--nproc_per_node): a FlagSet's normalize
// function.
func Dashes(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
}
