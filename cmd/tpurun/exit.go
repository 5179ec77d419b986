package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"tpurun/cmd/tpurun/internal/cli"
	"tpurun/internal/console"
	"tpurun/internal/failure"
)

// parseFailed answers a command line that was not run: 0 after --help (and --version, --python-path), else the
// error and its code.
func parseFailed(stderr io.Writer, err error) int {
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	var pe *failure.ProgramError
	if errors.As(err, &pe) { // PROGRAM.py or --run-path not there: not a usage error, a missing program (127)
		return cli.Exit(stderr, "", err)
	}
	fmt.Fprintf(stderr, "tpurun: %v\nRun 'tpurun --help' for usage.\n", err)
	if errors.Is(err, failure.ErrInternal) {
		return failure.ExitInternal
	}
	return failure.ExitUsage
}

// failer prints the error a run ends with on tpurun's stderr: a text line, or with --log-format json (log set) a log
// record; on its stdout, as a text line, when stderr has failed (its reader went away). A configuration error
// names the flag bound to the setting it is about (cli.Bind, beside each flag's definition).
type failer struct {
	w     *console.Console
	other *console.Console // stdout
	log   *zap.Logger
	flags *pflag.FlagSet // tpurun's flags, each bound to the settings it sets
}

func (f failer) fail(err error) int {
	code := failure.ExitCode(err)
	flag := cli.FlagOf(f.flags, failure.SettingOf(err))
	if err != nil && f.w.Err() != nil && f.other != nil {
		return cli.Exit(f.other, flag, err) // the reason on the other stream
	}
	if f.log == nil || err == nil {
		return cli.Exit(f.w, flag, err)
	}
	f.log.Error("tpurun exits", zap.Int("exit_code", code), zap.String("flag", flag), zap.Error(err))
	return code
}
