package pymodule

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// checkCopy fails unless dir/tpurun holds exactly the embedded files, byte for byte.
func checkCopy(t *testing.T, dir string) {
	t.Helper()
	m, err := embeddedModule()
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "tpurun"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.Name() != "__pycache__" {
			names = append(names, e.Name())
		}
	}
	if len(names) != len(m.files) {
		t.Fatalf("%s/tpurun holds %v, want the %d embedded files", dir, names, len(m.files))
	}
	for _, f := range m.files {
		b, err := os.ReadFile(filepath.Join(dir, "tpurun", f.name))
		if err != nil || !bytes.Equal(b, f.data) {
			t.Fatalf("%s/tpurun/%s differs from the embedded file (%v)", dir, f.name, err)
		}
	}
}

// noLeftovers fails when base holds temporary install directories.
func noLeftovers(t *testing.T, base string) {
	t.Helper()
	ents, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".python-") {
			t.Fatalf("%s was left in %s", e.Name(), base)
		}
	}
}

type fileID struct {
	ino   uint64
	mtime time.Time
}

func fileIDs(t *testing.T, dir string) map[string]fileID {
	t.Helper()
	out := map[string]fileID{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		out[p] = fileID{fi.Sys().(*syscall.Stat_t).Ino, fi.ModTime()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPythonPath: the module lands in <dir>/python-<version>-<hash>/tpurun, imports with that directory on
// PYTHONPATH, and a second call finds it there and writes nothing (same inodes, same times).
func TestPythonPath(t *testing.T) {
	base := t.TempDir()
	dir, err := Path(base, "")
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(base, DirName()) || !strings.HasPrefix(DirName(), "python-"+Version()+"-") ||
		len(DirName()) != len("python-"+Version()+"-")+16 {
		t.Fatalf("Path(%s) = %s (dir name %s, version %s)", base, dir, DirName(), Version())
	}
	checkCopy(t, dir)
	noLeftovers(t, base)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is required for the Python module tests: %v", err)
	}
	cmd := exec.Command(py, "-c", "import tpurun; print(tpurun.__version__, tpurun.__file__)")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if want := Version() + " " + filepath.Join(dir, "tpurun", "__init__.py"); err != nil || strings.TrimSpace(string(out)) != want {
		t.Fatalf("import tpurun with PYTHONPATH=%s: %v %q, want %q", dir, err, out, want)
	}
	// Backdate everything: a rewrite would show as a new inode or a new time.
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for p := range fileIDs(t, dir) {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	before := fileIDs(t, dir)
	again, err := Path(base, "")
	if err != nil || again != dir {
		t.Fatalf("second PythonPath: %s, %v", again, err)
	}
	after := fileIDs(t, dir)
	if len(after) != len(before) {
		t.Fatalf("files changed: %d, then %d", len(before), len(after))
	}
	for p, id := range before {
		if after[p] != id {
			t.Fatalf("%s was rewritten by a second PythonPath: %+v, then %+v", p, id, after[p])
		}
	}
}

// TestPythonPathUserCache: without a directory the module goes under $XDG_CACHE_HOME/tpurun, created 0700.
func TestPythonPathUserCache(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	t.Setenv("XDG_CACHE_HOME", cache)
	dir, err := Path("", "")
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(cache, "tpurun", DirName()) {
		t.Fatalf("Path(\"\") = %s", dir)
	}
	checkCopy(t, dir)
	fi, err := os.Stat(filepath.Join(cache, "tpurun"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s/tpurun: %v %v, want mode 0700", cache, fi.Mode(), err)
	}
}

// TestPythonPathConcurrent: launchers installing at once (8 processes and 8 goroutines) all get the one
// complete copy, and no temporary directory is left.
func TestPythonPathConcurrent(t *testing.T) {
	base := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for i := 0; i < 8; i++ {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), envTestMode+"=pythonpath", "PYTHONPATH_DIR="+base)
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	got := make([]string, 8)
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = Path(base, "")
		}()
	}
	wg.Wait()
	want := filepath.Join(base, DirName())
	for i := range got {
		if errs[i] != nil || got[i] != want {
			t.Errorf("goroutine %d: %s, %v", i, got[i], errs[i])
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil || outs[i].String() != want {
			t.Errorf("process %d: %v %q", i, err, outs[i].String())
		}
	}
	checkCopy(t, want)
	noLeftovers(t, base)
}

// TestPythonPathPlantedSymlink: a symbolic link where the install directory or its package directory goes is
// refused and never followed; a link in place of a file is replaced, its target untouched.
func TestPythonPathPlantedSymlink(t *testing.T) {
	evil := t.TempDir()
	evilInit := filepath.Join(evil, "tpurun", "__init__.py")
	if err := os.MkdirAll(filepath.Dir(evilInit), 0o755); err != nil {
		t.Fatal(err)
	}
	payload := []byte("raise SystemExit('planted')\n")
	if err := os.WriteFile(evilInit, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	unchanged := func() {
		t.Helper()
		b, err := os.ReadFile(evilInit)
		ents, _ := os.ReadDir(filepath.Dir(evilInit))
		if err != nil || !bytes.Equal(b, payload) || len(ents) != 1 {
			t.Fatalf("the link's target was written: %q, %d files, %v", b, len(ents), err)
		}
	}

	t.Run("install directory", func(t *testing.T) {
		base := t.TempDir()
		link := filepath.Join(base, DirName())
		if err := os.Symlink(evil, link); err != nil {
			t.Fatal(err)
		}
		dir, err := Path(base, "")
		if !errors.Is(err, ErrUnsafeInstallDir) || dir != "" || !strings.Contains(err.Error(), link+" is a symbolic link") {
			t.Fatalf("PythonPath over a planted link: %q, %v", dir, err)
		}
		unchanged()
	})
	t.Run("package directory", func(t *testing.T) {
		base := t.TempDir()
		final := filepath.Join(base, DirName())
		if err := os.Mkdir(final, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(evil, "tpurun"), filepath.Join(final, "tpurun")); err != nil {
			t.Fatal(err)
		}
		if _, err := Path(base, ""); !errors.Is(err, ErrUnsafeInstallDir) {
			t.Fatalf("PythonPath with a planted package link: %v", err)
		}
		unchanged()
	})
	t.Run("file", func(t *testing.T) {
		base := t.TempDir()
		dir, err := Path(base, "")
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, "tpurun", "__init__.py")
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(evilInit, f); err != nil {
			t.Fatal(err)
		}
		if again, err := Path(base, ""); err != nil || again != dir {
			t.Fatalf("%s, %v", again, err)
		}
		if fi, err := os.Lstat(f); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("%s is still not a regular file: %v", f, err)
		}
		checkCopy(t, dir)
		noLeftovers(t, base)
		unchanged()
	})
}

// TestPythonPathUnsafeDirs: a directory others can write (without the sticky bit), an install directory that is
// not a directory, writable by others, or owned by someone else: each is refused, naming the path.
func TestPythonPathUnsafeDirs(t *testing.T) {
	t.Run("dir writable by others", func(t *testing.T) {
		base := t.TempDir()
		if err := os.Chmod(base, 0o777); err != nil {
			t.Fatal(err)
		}
		if _, err := Path(base, ""); !errors.Is(err, ErrUnsafeInstallDir) || !strings.Contains(err.Error(), base+" is writable by others") {
			t.Fatalf("%v", err)
		}
		if err := os.Chmod(base, 0o777|os.ModeSticky); err != nil { // as /tmp: allowed
			t.Fatal(err)
		}
		if _, err := Path(base, ""); err != nil {
			t.Fatalf("a sticky directory: %v", err)
		}
	})
	t.Run("install directory is a file", func(t *testing.T) {
		base := t.TempDir()
		if err := os.WriteFile(filepath.Join(base, DirName()), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Path(base, ""); !errors.Is(err, ErrUnsafeInstallDir) || !strings.Contains(err.Error(), "is not a directory") {
			t.Fatalf("%v", err)
		}
	})
	t.Run("install directory writable by others", func(t *testing.T) {
		base := t.TempDir()
		dir, err := Path(base, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		if _, err := Path(base, ""); !errors.Is(err, ErrUnsafeInstallDir) || !strings.Contains(err.Error(), dir+" is writable by others") {
			t.Fatalf("%v", err)
		}
	})
	t.Run("install directory of another user", func(t *testing.T) {
		base := t.TempDir()
		dir, err := Path(base, "")
		if err != nil {
			t.Fatal(err)
		}
		m, _ := embeddedModule()
		other := os.Geteuid() + 1
		if _, err := installed(dir, m.files, other); !errors.Is(err, ErrUnsafeInstallDir) || !strings.Contains(err.Error(), "not by this user") {
			t.Fatalf("a directory of uid %d checked for uid %d: %v", os.Geteuid(), other, err)
		}
	})
	t.Run("not a directory", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Path(f, ""); !errors.Is(err, ErrUnsafeInstallDir) {
			t.Fatalf("%v", err)
		}
	})
}

// TestPythonPathRepairs: a copy that lost a file or had one cut short (a cleaner of old files, a full disk) is
// replaced by a complete one at the same path.
func TestPythonPathRepairs(t *testing.T) {
	for _, damage := range []string{"remove", "truncate"} {
		t.Run(damage, func(t *testing.T) {
			base := t.TempDir()
			dir, err := Path(base, "")
			if err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(dir, "tpurun", "_wire.py")
			if damage == "remove" {
				err = os.Remove(f)
			} else {
				err = os.Truncate(f, 10)
			}
			if err != nil {
				t.Fatal(err)
			}
			if again, err := Path(base, ""); err != nil || again != dir {
				t.Fatalf("%s, %v", again, err)
			}
			checkCopy(t, dir)
			noLeftovers(t, base)
		})
	}
}
