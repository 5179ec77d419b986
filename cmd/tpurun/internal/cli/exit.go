package cli

import (
	"fmt"
	"io"

	"tpurun/internal/exitcode"
	"tpurun/internal/failure"
)

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
	if code == exitcode.OK { // nothing failed: a late node of a job that had finished, say
		fmt.Fprintf(stderr, "tpurun: %v\n", err)
		return code
	}
	fmt.Fprintf(stderr, "tpurun: %v (exit %d)\n", err, code)
	return code
}
