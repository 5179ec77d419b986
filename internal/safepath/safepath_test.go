package safepath

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"tpurun/internal/failure"

	"tpurun/internal/testutil"
)

// bothResolvers runs f with openat2 and with the walk that replaces it where the kernel lacks openat2.
func bothResolvers(t *testing.T, f func(t *testing.T)) {
	t.Run("openat2", func(t *testing.T) {
		if _, err := unix.Openat2(unix.AT_FDCWD, ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC}); errors.Is(err, unix.ENOSYS) {
			t.Skip("this kernel has no openat2; the walk below is what runs here")
		}
		f(t)
	})
	t.Run("walk", func(t *testing.T) {
		noOpenat2.Store(true)
		defer noOpenat2.Store(false)
		f(t)
	})
}

// snapshot lists every path under dir with its content (for files) or link target, to prove nothing changed.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			out[p] = "-> " + l
			return err
		case d.IsDir():
			out[p] = "dir"
		default:
			b, err := os.ReadFile(p)
			out[p] = string(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBeneathRefusesPlantedSymlinks: with a directory symlink planted in the log tree (DIR/run/attempt_0/0 ->
// /victim, the attack of issue 16) or a file symlink where a log goes, nothing under the victim is created,
// truncated, opened or deleted, and the error names the symlink.
func TestBeneathRefusesPlantedSymlinks(t *testing.T) {
	bothResolvers(t, func(t *testing.T) {
		root, victim := t.TempDir(), t.TempDir()
		if err := os.WriteFile(filepath.Join(victim, "error.json"), []byte("precious"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(root, "run", "attempt_0", "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		mustSymlink(t, victim, filepath.Join(root, "run", "attempt_0", "0"))
		mustSymlink(t, filepath.Join(victim, "error.json"), filepath.Join(root, "run", "attempt_0", "1", "stdout.log"))
		mustSymlink(t, victim, filepath.Join(root, "elsewhere"))
		// the plant works: plain path calls go through it
		if _, err := os.Stat(filepath.Join(root, "run", "attempt_0", "0", "error.json")); err != nil {
			t.Fatalf("the planted symlink does not reach the victim: %v", err)
		}
		before := snapshot(t, victim)
		for _, tc := range []struct {
			name string
			do   func() error
			link string // the symlink the error must name, "" for a path leaving the root
		}{
			{"mkdir the rank dir", func() error { return MkdirAllBeneath(root, "run/attempt_0/0", 0o755) }, "run/attempt_0/0"},
			{"mkdir below it", func() error { return MkdirAllBeneath(root, "run/attempt_0/0/sub/deeper", 0o755) }, "run/attempt_0/0"},
			{"mkdir through a top symlink", func() error { return MkdirAllBeneath(root, "elsewhere/x", 0o755) }, "elsewhere"},
			{"create a log through the dir", func() error {
				return closeIf(OpenBeneath(root, "run/attempt_0/0/stdout.log", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644))
			}, "run/attempt_0/0"},
			{"truncate through a file symlink", func() error {
				return closeIf(OpenBeneath(root, "run/attempt_0/1/stdout.log", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644))
			}, "run/attempt_0/1/stdout.log"},
			{"read the error file through the dir", func() error {
				return closeIf(OpenBeneath(root, "run/attempt_0/0/error.json", os.O_RDONLY, 0))
			}, "run/attempt_0/0"},
			{"remove the error file through the dir", func() error { return RemoveBeneath(root, "run/attempt_0/0/error.json") }, "run/attempt_0/0"},
			{"climb out", func() error {
				return closeIf(OpenBeneath(root, "../"+filepath.Base(victim)+"/error.json", os.O_WRONLY|os.O_TRUNC, 0))
			}, ""},
			{"climb out inside", func() error { return MkdirAllBeneath(root, "run/../../x", 0o755) }, ""},
			{"absolute", func() error { return RemoveBeneath(root, filepath.Join(victim, "error.json")) }, ""},
		} {
			err := tc.do()
			var ue *UnsafePathError
			if !errors.As(err, &ue) || !errors.Is(err, ErrUnsafePath) || ue.Link != tc.link {
				t.Fatalf("%s: %v, want an unsafe path naming %q", tc.name, err, tc.link)
			}
			if tc.link != "" && (ue.Target == "" || !bytes.Contains([]byte(err.Error()), []byte(filepath.Join(root, tc.link)))) {
				t.Fatalf("%s: %q does not name the symlink and its target", tc.name, err)
			}
			if after := snapshot(t, victim); !mapsEqual(before, after) {
				t.Fatalf("%s: the victim changed:\n%v\nto\n%v", tc.name, before, after)
			}
		}
		// a symlink as the last component is removed itself, never its target
		if err := RemoveBeneath(root, "run/attempt_0/1/stdout.log"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(root, "run", "attempt_0", "1", "stdout.log")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the symlink is still there: %v", err)
		}
		if after := snapshot(t, victim); !mapsEqual(before, after) {
			t.Fatalf("removing the symlink changed the victim: %v", after)
		}
	})
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func closeIf(f *os.File, err error) error {
	if f != nil {
		f.Close()
	}
	return err
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestBeneathRefusesSpecialFiles: a FIFO, a socket or a directory where a log or error file goes is refused at
// once, for reading and for writing: opening never blocks waiting for a FIFO's other end.
func TestBeneathRefusesSpecialFiles(t *testing.T) {
	bothResolvers(t, func(t *testing.T) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "r", "dir.json"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(filepath.Join(root, "r", "error.json"), 0o644); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("unix", filepath.Join(root, "r", "sock.log"))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		for _, tc := range []struct {
			file string
			flag int
			kind fs.FileMode
		}{
			{"error.json", os.O_RDONLY, fs.ModeNamedPipe},
			{"error.json", os.O_WRONLY | os.O_CREATE | os.O_TRUNC, fs.ModeNamedPipe},
			{"error.json", os.O_RDWR, fs.ModeNamedPipe},
			{"sock.log", os.O_RDONLY, fs.ModeSocket},
			{"sock.log", os.O_WRONLY | os.O_CREATE | os.O_TRUNC, fs.ModeSocket},
			{"dir.json", os.O_RDONLY, fs.ModeDir},
			{"dir.json", os.O_WRONLY | os.O_CREATE | os.O_TRUNC, fs.ModeDir},
		} {
			done := make(chan error, 1)
			go func() { done <- closeIf(OpenBeneath(root, "r/"+tc.file, tc.flag, 0o644)) }()
			err := testutil.Done(t, fmt.Sprintf("the open of %s (flags %#x) to return, not block", tc.file, tc.flag), done)
			var ne *NotRegularError
			if !errors.As(err, &ne) || !errors.Is(err, ErrNotRegular) || ne.Mode&tc.kind == 0 || ne.Path != filepath.Join(root, "r", tc.file) {
				t.Fatalf("%s (flags %#x): %v, want it refused as a %v", tc.file, tc.flag, err, tc.kind)
			}
		}
		// the launcher can remove the planted FIFO and put its own file there
		if err := RemoveBeneath(root, "r/error.json"); err != nil {
			t.Fatal(err)
		}
		f, err := OpenBeneath(root, "r/error.json", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	})
}

// TestBeneathWorks: the ordinary use: directories created with their parents and the mode asked for (before the
// umask), idempotently; files created, truncated, appended, read back and removed, in blocking mode; missing files
// and a root that is not a directory are errors that say so.
func TestBeneathWorks(t *testing.T) {
	bothResolvers(t, func(t *testing.T) {
		root := t.TempDir()
		old := syscall.Umask(0o022)
		defer syscall.Umask(old)
		for range 2 {
			if err := MkdirAllBeneath(root, "run-1/attempt_0/3", 0o775); err != nil {
				t.Fatal(err)
			}
		}
		if err := MkdirAllBeneath(root, ".", 0o755); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(filepath.Join(root, "run-1", "attempt_0", "3"))
		if err != nil || !st.IsDir() || st.Mode().Perm() != 0o755 {
			t.Fatalf("rank dir: %v %v", st, err)
		}
		write := func(flag int, s string) {
			t.Helper()
			f, err := OpenBeneath(root, "run-1/attempt_0/3/stdout.log", flag, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK != 0 {
				t.Fatalf("flags %#x %v: want a blocking file", fl, err)
			}
			if f.Name() != filepath.Join(root, "run-1", "attempt_0", "3", "stdout.log") {
				t.Fatalf("name %s", f.Name())
			}
			if _, err := f.WriteString(s); err != nil {
				t.Fatal(err)
			}
		}
		write(os.O_WRONLY|os.O_CREATE|os.O_TRUNC, "first\n")
		write(os.O_WRONLY|os.O_CREATE|os.O_TRUNC, "second\n")
		write(os.O_WRONLY|os.O_APPEND, "third\n")
		f, err := OpenBeneath(root, "run-1/attempt_0/3/stdout.log", os.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 64)
		n, _ := f.Read(b)
		f.Close()
		if string(b[:n]) != "second\nthird\n" {
			t.Fatalf("read back %q", b[:n])
		}
		if st, _ := os.Stat(filepath.Join(root, "run-1", "attempt_0", "3", "stdout.log")); st.Mode().Perm() != 0o644 {
			t.Fatalf("log mode %v", st.Mode())
		}
		d, err := OpenBeneath(root, "run-1/attempt_0", os.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		names, _ := d.Readdirnames(-1)
		d.Close()
		if !slices.Equal(names, []string{"3"}) {
			t.Fatalf("dir %v", names)
		}
		if err := RemoveBeneath(root, "run-1/attempt_0/3/stdout.log"); err != nil {
			t.Fatal(err)
		}
		if err := RemoveBeneath(root, "run-1/attempt_0/3/stdout.log"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("removing a missing file: %v", err)
		}
		if _, err := OpenBeneath(root, "run-1/nope/x.log", os.O_RDONLY, 0); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("opening a missing file: %v", err)
		}
		if err := RemoveBeneath(root, "run-1/attempt_0/3"); err == nil {
			t.Fatal("RemoveBeneath removed a directory")
		}
		// a root that is a regular file, or missing
		file := filepath.Join(root, "plain")
		os.WriteFile(file, nil, 0o644)
		if err := MkdirAllBeneath(file, "x", 0o755); !errors.Is(err, syscall.ENOTDIR) {
			t.Fatalf("root is a file: %v", err)
		}
		if _, err := OpenBeneath(filepath.Join(root, "missing"), "x", os.O_RDONLY, 0); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("root missing: %v", err)
		}
	})
}

// TestUnsafePathIsAConfigError: an unsafe path, bare or wrapped, is a configuration error (exit 2).
func TestUnsafePathIsAConfigError(t *testing.T) {
	for _, err := range []error{ErrUnsafePath, fmt.Errorf("log dir: %w", &UnsafePathError{Root: "/logs", Path: "a/b", Link: "a"})} {
		if !errors.Is(err, failure.ErrConfig) || failure.ExitCode(err) != failure.ExitUsage {
			t.Errorf("%v: errors.Is(ErrConfig) %v, ExitCode %d", err, errors.Is(err, failure.ErrConfig), failure.ExitCode(err))
		}
	}
}
