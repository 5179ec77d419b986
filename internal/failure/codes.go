package failure

import (
	"fmt"
	"strings"
	"syscall"
)

// The exit codes of tpurun; ExitTable says what each means.
const (
	ExitOK            = 0
	ExitReplicaError  = 1
	ExitUsage         = 2
	ExitResults       = 65
	ExitRendezvous    = 69
	ExitInternal      = 70
	ExitIOError       = 74
	ExitTimeout       = 124
	ExitNotExecutable = 126
	ExitNotFound      = 127
)

// ExitRow is one line of the exit-code table: a code (a number, the range "1-125" or "128+N") and what it means.
type ExitRow struct {
	Code string
	// Help is the row's line in `tpurun --help`, "" where another row's line says it (1 in 1-125's, 141 in 74's).
	Help string
}

// ExitTable is tpurun's exit codes, the one list of them, in the order the README and `tpurun --help` show them:
// ExitHelp is built from it, and a test holds the README's table to it (the same codes in the same order). The
// library's ExitCode maps into the same rows: a caller's context deadline is 124 as --timeout is, a caller's cancel
// 143 as a SIGTERM is.
var ExitTable = []ExitRow{
	{"0", "every worker exited 0 (and every expected result arrived), or a node came after its job ended"},
	{"1-125", "the exit code of the first worker that failed; 1 when only a replica reported an error (--fn)"},
	{"1", ""},
	{"128+N", "the first failed worker was killed by signal N (143 = SIGTERM, 137 = SIGKILL), or tpurun was stopped by N (a library caller's cancel: 143)"},
	{"141", ""},
	{"2", "usage or configuration error, detected before anything started"},
	{"65", "result contract violated (--fn, --expect-results, --results, --json)"},
	{"69", "the multi-host rendezvous failed at run time, or its store (node 0's server, etcd) was lost"},
	{"70", "internal error of tpurun"},
	{"74", "writing the output failed (stdout or stderr on a full disk, --json, --results); a closed stdout is 141"},
	{"124", "--timeout expired (a library caller's context deadline: the same)"},
	{"126", "PROGRAM cannot be executed"},
	{"127", "PROGRAM not found"},
}

// ExitHelp is the table as `tpurun --help` and `tpurun help exit-codes` show it.
var ExitHelp = exitHelp(ExitTable)

func exitHelp(rows []ExitRow) string {
	var lines []string
	for _, r := range rows {
		if r.Help != "" {
			lines = append(lines, fmt.Sprintf("  %-6s %s", r.Code, r.Help))
		}
	}
	return strings.Join(lines, "\n")
}

// ExitSignal is the exit code of a process killed by signal sig, and of tpurun stopped by it: 128+sig, as a shell
// reports it (143 for SIGTERM).
func ExitSignal(sig syscall.Signal) int { return 128 + int(sig) }
