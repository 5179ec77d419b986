package testutil

import (
	"os"
	"os/signal"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DefaultSignals gives SIGHUP and SIGINT their default action where this process was started with them ignored
// (`nohup make test`, `make test &` from a script: a non-interactive shell ignores SIGINT in the jobs it puts in
// the background), so that every process a test starts begins from the dispositions a terminal gives. tpurun keeps
// an ignored signal ignored, as nohup asks, and the tests of its signal forwarding would otherwise fail for how the
// suite was started rather than for the code. Dispatch calls it in the test binary (never in a fake worker, which
// keeps what its launcher gave it).
//
// The default action applies to this process too, as it would have from a terminal.
func DefaultSignals() error {
	for _, s := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		var cur, dfl [4]uint64 // the kernel's struct sigaction on 64-bit Linux; zero is SIG_DFL
		if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(s), 0, uintptr(unsafe.Pointer(&cur)), 8, 0, 0); errno != 0 {
			return errno
		}
		if cur[0] != 1 { // SIG_IGN: anything else (the default, a handler of the runtime's) is left as it is
			continue
		}
		if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(s), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0); errno != 0 {
			return errno
		}
		// The runtime remembers the signal as ignored at start (signal.Ignored, which tpurun's code asks in the
		// tests that run it in this process): Notify forgets that and takes the default found now as the one to
		// restore, Reset leaves the runtime's handler, which acts as the default does.
		signal.Notify(make(chan os.Signal, 1), s)
		signal.Reset(s)
	}
	return nil
}
