package worker

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ChannelID returns the identity of a result pipe for EnvResultID: "<st_dev>:<st_ino>" of f in decimal. The
// launcher computes it from the write end it hands a worker (both ends of a pipe share it).
func ChannelID(f *os.File) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return "", fmt.Errorf("identity of the result channel %s: %w", f.Name(), err)
	}
	return formatChannelID(uint64(st.Dev), st.Ino), nil
}

func formatChannelID(dev, ino uint64) string {
	return strconv.FormatUint(dev, 10) + ":" + strconv.FormatUint(ino, 10)
}

// ParseChannelID parses an EnvResultID value, "<st_dev>:<st_ino>" in decimal.
func ParseChannelID(s string) (dev, ino uint64, err error) {
	bad := &EnvError{Var: EnvResultID, Value: s, Err: ErrBadEnv,
		Detail: "want <st_dev>:<st_ino> of the result pipe in decimal, as tpurun sets it"}
	d, i, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return 0, 0, bad
	}
	if dev, err = parseDecimal(d); err != nil {
		return 0, 0, bad
	}
	if ino, err = parseDecimal(i); err != nil {
		return 0, 0, bad
	}
	return dev, ino, nil
}

// parseDecimal is strconv.ParseUint(s, 10, 64) without the sign and the underscores it would otherwise accept.
func parseDecimal(s string) (uint64, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseUint(s, 10, 64)
}

// channelProblem says why descriptor fd (EnvResultFD=v) is not the result channel tpurun gave this process, as an
// *EnvError, or returns nil when it is: open, writable and, when EnvResultID is set, the very pipe it names.
func channelProblem(fd int, v string, getenv func(string) string) error {
	bad := func(detail string) error {
		return &EnvError{Var: EnvResultFD, Value: v, Err: ErrBadEnv, Detail: detail}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return bad(fmt.Sprintf("descriptor %d is not open in this process (%v); it must be inherited from tpurun", fd, err))
	}
	if id := getenv(EnvResultID); strings.TrimSpace(id) != "" {
		dev, ino, err := ParseChannelID(id)
		if err != nil {
			return err
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFIFO || uint64(st.Dev) != dev || st.Ino != ino {
			return bad(fmt.Sprintf("descriptor %d is %s, not the pipe %s=%s names, so it is not the result channel "+
				"tpurun gave this process. The variables were probably inherited from a tpurun worker that started "+
				"this program: only that worker may report (hand the values back to it), or unset %s",
				fd, describeFile(&st), EnvResultID, strings.TrimSpace(id), EnvResultFD))
		}
	}
	flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFL, 0)
	if errno == 0 && flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		return bad(fmt.Sprintf("descriptor %d is %s open read-only; the channel is the write end of a pipe", fd, describeFile(&st)))
	}
	return nil
}

func describeFile(st *syscall.Stat_t) string {
	kind := fmt.Sprintf("a file of mode %o", st.Mode)
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFIFO:
		kind = "a pipe"
	case syscall.S_IFREG:
		kind = "a regular file"
	case syscall.S_IFSOCK:
		kind = "a socket"
	case syscall.S_IFCHR:
		kind = "a character device"
	case syscall.S_IFDIR:
		kind = "a directory"
	}
	return kind + " (" + formatChannelID(uint64(st.Dev), st.Ino) + ")"
}
