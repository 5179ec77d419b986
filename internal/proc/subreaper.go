package proc

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SetSubreaper makes this process the child subreaper of its descendants (prctl PR_SET_CHILD_SUBREAPER): orphans
// below it are reparented to it instead of to PID 1, so it must reap them (see Reaper).
func SetSubreaper() error { return setSubreaper(1) }

// ClearSubreaper undoes SetSubreaper: orphans below this process go to PID 1 again.
func ClearSubreaper() error { return setSubreaper(0) }

func setSubreaper(on uintptr) error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, on, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	return nil
}

// IsSubreaper reports whether this process is a child subreaper (false when the kernel cannot tell).
func IsSubreaper() bool {
	var on int32
	err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&on)), 0, 0, 0)
	return err == nil && on != 0
}
