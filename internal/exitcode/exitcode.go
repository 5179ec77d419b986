// Package exitcode is tpurun's exit-code table: the one place each code is defined, with the code of a signal
// (Signal) and the mark a usage error carries (IsUsage). The launcher maps every outcome into it
// (failure.ExitCode, by typed errors); the results document records the same codes.
package exitcode

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// The exit codes of tpurun; Table says what each means.
const (
	OK            = 0
	ReplicaError  = 1
	Usage         = 2
	Results       = 65
	Rendezvous    = 69
	Internal      = 70
	IOError       = 74
	Timeout       = 124
	NotExecutable = 126
	NotFound      = 127
)

// Row is one line of the exit-code table: a code (a number, the range "1-125" or "128+N") and what it means.
type Row struct {
	Code string
	// Help is the row's line in `tpurun --help`, "" where another row's line says it (1 in 1-125's, 141 in 74's).
	Help string
}

// Table is tpurun's exit codes, the one list of them, in the order the README and `tpurun --help` show them: Help
// is built from it, and a test holds the README's table to it (the same codes in the same order).
var Table = []Row{
	{"0", "every worker exited 0 (and every expected result arrived), or a node came after its job ended"},
	{"1-125", "the exit code of the first worker that failed; 1 when only a replica reported an error (--fn)"},
	{"1", ""},
	{"128+N", "the first failed worker was killed by signal N (143 = SIGTERM, 137 = SIGKILL), or tpurun was stopped by N"},
	{"141", ""},
	{"2", "usage or configuration error, detected before anything started"},
	{"65", "result contract violated (--fn, --expect-results, --results, --json)"},
	{"69", "the multi-host rendezvous failed at run time, or its store (node 0's server, etcd) was lost"},
	{"70", "internal error of tpurun"},
	{"74", "writing the output failed (stdout or stderr on a full disk, --json, --results); a closed stdout is 141"},
	{"124", "--timeout expired"},
	{"126", "PROGRAM cannot be executed"},
	{"127", "PROGRAM not found"},
}

// Help is the table as `tpurun --help` and `tpurun help exit-codes` show it.
var Help = help(Table)

func help(rows []Row) string {
	var lines []string
	for _, r := range rows {
		if r.Help != "" {
			lines = append(lines, fmt.Sprintf("  %-6s %s", r.Code, r.Help))
		}
	}
	return strings.Join(lines, "\n")
}

// Signal is the exit code of a process killed by signal sig, and of tpurun stopped by it: 128+sig, as a shell
// reports it (143 for SIGTERM).
func Signal(sig syscall.Signal) int { return 128 + int(sig) }

// IsUsage reports whether err is a usage or configuration error (exit Usage): whether the first error in its tree
// with a method Usage() bool says so. Each package marks its own such errors, its sentinels and the typed errors
// that match them, as net.Error marks a timeout, so this table names no package's errors. NewUsage makes a marked
// sentinel.
func IsUsage(err error) bool {
	var u interface{ Usage() bool }
	return errors.As(err, &u) && u.Usage()
}

// NewUsage returns a sentinel error, as errors.New(msg) does, that IsUsage reports.
func NewUsage(msg string) error { return &usageError{msg: msg} }

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// Usage marks the error as a usage or configuration error.
func (e *usageError) Usage() bool { return true }
