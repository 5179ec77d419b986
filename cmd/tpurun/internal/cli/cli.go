// Package cli owns tpurun's command line below cmd/tpurun's main: it reads a command line as torchrun's argparse
// does (unique prefixes of torchrun's flags, '_' for '-', PET_<FLAG> defaults, plain seconds, a suggestion for a
// mistyped flag: Expand before parsing, ApplyPET after); it registers the device flags that run, plan and doctor
// share and turns them into topology.Options and topology.Request; and it parses the other flags' values into
// what a spec.Spec takes. A flag that sets a failure.Setting is bound to it where it is defined (Bind), so that an
// error about the setting names the flag (FlagOf). Detection is the launcher's.
package cli

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/topology"
	"tpurun/rendezvous"
)

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

// ParseRendezvousConf is rendezvous.ParseConf, for --rdzv-conf: a malformed entry is a configuration error.
func ParseRendezvousConf(s string) (map[string]string, error) { return rendezvous.ParseConf(s) }

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
	bad := func(format string, a ...any) (console.StdSpec, error) {
		hint := fmt.Sprintf(format, a...)
		return console.StdSpec{}, &failure.ConfigError{Field: failure.Named(flag), Value: s, Hint: hint}
	}
	for _, part := range strings.Split(s, ",") {
		r, v, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return bad("entry %q is not local_rank:std; write e.g. 0:1,1:3", part)
		}
		rank, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || rank < 0 {
			return bad("local rank %q in %q is not a non-negative integer", r, part)
		}
		if _, dup := spec.PerRank[rank]; dup {
			return bad("local rank %d is listed twice", rank)
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
	return slices.Sorted(maps.Keys(seen)), nil
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
	switch {
	case err == nil:
	case flag != "":
		fmt.Fprintf(stderr, "tpurun: %s %v (exit %d)\n", flag, err, code)
	case code == failure.ExitOK: // nothing failed: a late node of a job that had finished, say
		fmt.Fprintf(stderr, "tpurun: %v\n", err)
	default:
		fmt.Fprintf(stderr, "tpurun: %v (exit %d)\n", err, code)
	}
	return code
}
