package attempt

import (
	"fmt"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"tpurun/internal/failure"
	"tpurun/internal/setting"
)

// maxArgStrlen is Linux's limit on one argument or environment string (MAX_ARG_STRLEN, 32 pages).
const maxArgStrlen = 32 * 4096

// argListError explains an execve that failed with E2BIG ("argument list too long") for rank: how big the
// arguments and the environment are against the kernel's limits, and the largest variables to trim. Too big a
// command line is the user's to fix, not a launcher bug: it is a *failure.ConfigError (exit 2).
func argListError(rank int, argv, env []string) error {
	size := func(ss []string) (n int) {
		for _, s := range ss {
			n += len(s) + 1 + 8 // the string, its NUL and its pointer
		}
		return n
	}
	limit := 0
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_STACK, &rl) == nil && rl.Cur != unix.RLIM_INFINITY {
		limit = int(rl.Cur / 4) // Linux allows a quarter of the stack for them
	}
	for _, s := range append(append([]string(nil), argv...), env...) {
		if len(s) >= maxArgStrlen {
			name, _, _ := strings.Cut(s, "=")
			return &failure.ConfigError{Field: setting.Environment, Value: name, Hint: fmt.Sprintf("rank %d could not start: one argument or variable is %d bytes, "+
				"over Linux's %d-byte limit for a single string; shorten it (or pass the data in a file)", rank, len(s), maxArgStrlen)}
		}
	}
	vars := append([]string(nil), env...)
	sort.Slice(vars, func(a, b int) bool { return len(vars[a]) > len(vars[b]) })
	var big []string
	for _, kv := range vars[:min(3, len(vars))] {
		name, _, _ := strings.Cut(kv, "=")
		big = append(big, fmt.Sprintf("%s (%d bytes)", name, len(kv)))
	}
	lim := "the kernel's limit"
	if limit > 0 {
		lim = fmt.Sprintf("the kernel's limit of about %d bytes (a quarter of the stack limit, ulimit -s)", limit)
	}
	return &failure.ConfigError{Field: setting.Environment, Value: fmt.Sprintf("%d variables", len(env)), Hint: fmt.Sprintf("rank %d could not start: its "+
		"arguments (%d bytes) and environment (%d bytes) exceed %s; unset or shorten the largest variables: %s, or raise ulimit -s",
		rank, size(argv), size(env), lim, strings.Join(big, ", "))}
}
