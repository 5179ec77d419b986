package safepath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"tpurun/internal/failure"
)

var (
	// ErrUnsafePath: a path below a root directory goes through a symlink or leaves the root.
	ErrUnsafePath = failure.NewConfigKind("unsafe path") // a usage error: exit 2
	// ErrNotRegular: where a regular file was expected there is a FIFO, a socket, a device or a directory.
	ErrNotRegular = errors.New("not a regular file")
)

// UnsafePathError is a path below Root that goes through the symlink Link (below Root, pointing at Target) or,
// when Link is empty, leaves Root (absolute, or climbing with "..").
type UnsafePathError struct {
	Root   string
	Path   string // the path asked for, relative to Root
	Link   string
	Target string
}

func (e *UnsafePathError) Error() string {
	if e.Link == "" {
		return fmt.Sprintf("%q is not a path below %s (absolute, or climbing with ..); files under it are created only below it", e.Path, e.Root)
	}
	return fmt.Sprintf("%s is a symlink (to %s); nothing under %s is created, opened or removed through a symlink: remove it, or pick another directory",
		filepath.Join(e.Root, e.Link), e.Target, e.Root)
}

// Unwrap makes errors.Is(err, ErrUnsafePath) true.
func (e *UnsafePathError) Unwrap() error { return ErrUnsafePath }

// NotRegularError is a file that is not a regular file (or not a directory, where one was asked for).
type NotRegularError struct {
	Path string
	Mode fs.FileMode // its type bits
}

func (e *NotRegularError) Error() string {
	what := "a " + fileKind(e.Mode)
	return fmt.Sprintf("%s is %s, not a regular file; remove it (something other than tpurun put it there)", e.Path, what)
}

// Unwrap makes errors.Is(err, ErrNotRegular) true.
func (e *NotRegularError) Unwrap() error { return ErrNotRegular }

func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "special file"
}

// noOpenat2 is set once openat2 is known to be missing, and by tests to exercise the walk.
var noOpenat2 atomic.Bool

const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// OpenBeneath opens rel, a path below the directory root, as os.OpenFile does with flag and perm, without
// following a symlink in any component of rel and without leaving root. The file must be a regular file (with
// O_DIRECTORY in flag, a directory): it is opened non-blocking and checked before it is returned (in blocking
// mode), so a FIFO or socket planted there is refused at once instead of blocking. Errors: *UnsafePathError,
// *NotRegularError, or an *fs.PathError (errors.Is(err, fs.ErrNotExist) for a missing file).
func OpenBeneath(root, rel string, flag int, perm os.FileMode) (*os.File, error) {
	rootfd, clean, err := openRoot(root, rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rootfd)
	full := filepath.Join(root, clean)
	fd, err := openAt(rootfd, clean, flag|unix.O_NONBLOCK, uint32(perm.Perm()))
	if err != nil {
		return nil, explain(root, rel, clean, "open", err)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: full, Err: err}
	}
	f := os.NewFile(uintptr(fd), full)
	st, err := f.Stat()
	if dir := flag&unix.O_DIRECTORY != 0; err == nil && (dir && !st.IsDir() || !dir && !st.Mode().IsRegular()) {
		err = &NotRegularError{Path: full, Mode: st.Mode().Type()}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// MkdirAllBeneath creates the directory rel below root, with its missing parents (mode perm before the umask),
// without following a symlink in any component and without leaving root. Existing directories are fine.
func MkdirAllBeneath(root, rel string, perm os.FileMode) error {
	rootfd, clean, err := openRoot(root, rel)
	if err != nil {
		return err
	}
	defer unix.Close(rootfd)
	fd, err := walk(rootfd, strings.Split(clean, "/"), true, uint32(perm.Perm()))
	if err != nil {
		return explain(root, rel, clean, "mkdir", err)
	}
	unix.Close(fd) // never rootfd: rel has at least one component (".")
	return nil
}

// RemoveBeneath removes the file rel below root (not a directory) without following a symlink in any component
// of rel: a symlink as the last component is removed itself, never its target. A missing file is an error
// matching fs.ErrNotExist.
func RemoveBeneath(root, rel string) error {
	rootfd, clean, err := openRoot(root, rel)
	if err != nil {
		return err
	}
	defer unix.Close(rootfd)
	dir, base := filepath.Split(clean)
	if base == "." || base == "" {
		return &UnsafePathError{Root: root, Path: rel}
	}
	dirfd := rootfd
	if dir != "" {
		if dirfd, err = openAt(rootfd, filepath.Clean(dir), unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
			return explain(root, rel, clean, "remove", err)
		}
		defer unix.Close(dirfd)
	}
	if err := unix.Unlinkat(dirfd, base, 0); err != nil {
		return &fs.PathError{Op: "remove", Path: filepath.Join(root, clean), Err: err}
	}
	return nil
}

// openRoot opens the root directory (following symlinks: it is the operator's) and cleans rel, refusing an
// absolute rel or one with a ".." component.
func openRoot(root, rel string) (int, string, error) {
	if filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") || strings.HasSuffix(rel, "/..") || strings.Contains(rel, "/../") {
		return -1, "", &UnsafePathError{Root: root, Path: rel}
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", &fs.PathError{Op: "open", Path: root, Err: err}
	}
	return fd, filepath.Clean(rel), nil
}

// openAt opens rel below dirfd with openat2's beneath resolution, or the walk where openat2 is missing.
func openAt(dirfd int, rel string, flag int, mode uint32) (int, error) {
	flag |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if flag&unix.O_CREAT == 0 && flag&unix.O_TMPFILE != unix.O_TMPFILE {
		mode = 0 // openat2 refuses a mode it would not use
	}
	if !noOpenat2.Load() {
		for tries := 0; ; tries++ {
			fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: uint64(flag), Mode: uint64(mode), Resolve: beneath})
			if errors.Is(err, unix.EAGAIN) && tries < 16 {
				continue // a rename elsewhere raced the lookup: the kernel asks to retry
			}
			if !errors.Is(err, unix.ENOSYS) {
				return fd, err
			}
			noOpenat2.Store(true)
			break
		}
	}
	parts := strings.Split(rel, "/")
	cur, err := walk(dirfd, parts[:len(parts)-1], false, 0)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Openat(cur, parts[len(parts)-1], flag, mode)
	if cur != dirfd {
		unix.Close(cur)
	}
	return fd, err
}

// walk opens the directory that parts name below dirfd one component at a time, each relative to the last and
// refused if a symlink, making a missing one (mode perm) when create is set. It returns dirfd itself for no parts,
// else a descriptor the caller closes.
func walk(dirfd int, parts []string, create bool, perm uint32) (int, error) {
	cur := dirfd
	for _, p := range parts {
		fd, err := openDir(cur, p)
		if create && errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(cur, p, perm); err == nil || errors.Is(err, unix.EEXIST) {
				fd, err = openDir(cur, p)
			}
		}
		if cur != dirfd {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	return cur, nil
}

// openDir opens the directory name in dirfd, refusing a symlink (ELOOP or ENOTDIR).
func openDir(dirfd int, name string) (int, error) {
	return unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// explain turns a failed resolution into the error that names its cause: the first symlink along clean (an
// *UnsafePathError), a FIFO, socket or directory where a file was to be opened (*NotRegularError), or the
// error as it is.
func explain(root, rel, clean, op string, err error) error {
	if errors.Is(err, unix.EXDEV) {
		return &UnsafePathError{Root: root, Path: rel} // openat2: the path would leave root
	}
	parts := strings.Split(clean, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		st, serr := os.Lstat(filepath.Join(root, sub)) // what the walk met: only to name the cause
		if serr != nil {
			break
		}
		mode := st.Mode().Type()
		if mode&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(filepath.Join(root, sub))
			return &UnsafePathError{Root: root, Path: rel, Link: sub, Target: target}
		}
		if i == len(parts)-1 && op == "open" && !mode.IsRegular() &&
			(errors.Is(err, unix.ENXIO) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EOPNOTSUPP)) {
			return &NotRegularError{Path: filepath.Join(root, clean), Mode: mode}
		}
	}
	return &fs.PathError{Op: op, Path: filepath.Join(root, clean), Err: err}
}
