package pymodule

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrUnsafeInstallDir means a directory Path would install into or hand to Python is not safe to use: a
// symbolic link, not a directory, owned by another user, or writable by others (without the sticky bit).
var ErrUnsafeInstallDir = errors.New("unsafe directory for the Python module")

// Path returns a directory to put on PYTHONPATH for `import tpurun`: the embedded module, installed once into
// dir/python-<version>-<first 16 hex digits of the content hash>/tpurun/, so that another build of the module (or
// another binary recorded in it) never shares or rewrites a copy. dir "" means the user's cache directory,
// $XDG_CACHE_HOME/tpurun or ~/.cache/tpurun (created 0700). binary, when not "", is the absolute path of a tpurun
// binary recorded in the copy (BinaryFile), so that a program whose PYTHONPATH holds it (`export
// PYTHONPATH=$(tpurun --python-path)`) runs that binary from tpurun.spawn even when tpurun is not on its PATH.
//
// When the copy is there already, Path only checks it with lstat calls (the directory, each file's size)
// and writes nothing. Otherwise it writes the module into a fresh private temporary directory beside it and
// renames that into place, so a reader never sees a partial copy and concurrent launchers (threads or processes)
// all end with the one copy that won the rename. A copy that lost a file (a cleaner of old files) is replaced
// the same way.
//
// It never follows a symbolic link it did not expect: the install directory and everything in it must be real
// directories and files of this user, and dir must not be writable by others unless it has the sticky bit (as
// /tmp has); otherwise the error wraps ErrUnsafeInstallDir and names the path, and nothing is written there.
func Path(dir, binary string) (string, error) {
	m, err := module(binary)
	if err != nil {
		return "", fmt.Errorf("the embedded Python module: %w", err)
	}
	if dir, err = installDir(dir); err != nil {
		return "", err
	}
	final := filepath.Join(dir, "python-"+m.version+"-"+m.hash[:16])
	uid := os.Geteuid()
	if ok, err := installed(final, m.files, uid); err != nil {
		return "", err
	} else if ok {
		return final, nil
	}
	// Not there, or incomplete: build a copy beside it and rename it into place.
	tmp, err := writeCopy(dir, m.files)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // gone after a successful rename; else our copy is not needed
	if err := placeCopy(tmp, final, m.files, uid); err != nil {
		return "", err
	}
	return final, nil
}

// installDir is the absolute install directory for dir ("": the user's cache directory, created), checked with
// checkParentDir.
func installDir(dir string) (string, error) {
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("the Python module's install directory: %w; set XDG_CACHE_HOME or HOME, or pass a directory", err)
		}
		dir = filepath.Join(cache, "tpurun")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", fmt.Errorf("the Python module's install directory: %w", err)
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("the Python module's install directory %q: %w", dir, err)
	}
	return abs, checkParentDir(abs)
}

// placeCopy renames the complete copy tmp to final. A rename onto a directory that exists fails; then another
// launcher won (final is complete: done), or the old copy is incomplete and is moved aside first.
func placeCopy(tmp, final string, files []pythonFile, uid int) error {
	dir := filepath.Dir(final)
	for attempt := 0; ; attempt++ {
		err := os.Rename(tmp, final)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EEXIST) && !errors.Is(err, syscall.ENOTEMPTY) {
			return fmt.Errorf("install the Python module into %s: %w", final, err)
		}
		if ok, err := installed(final, files, uid); err != nil || ok {
			return err
		}
		if attempt == 3 {
			return fmt.Errorf("install the Python module into %s: the directory keeps changing under concurrent installs; remove it and try again", final)
		}
		// Incomplete: move it aside (another launcher may do the same; the loser's rename fails harmlessly).
		old, err := os.MkdirTemp(dir, ".python-old-")
		if err != nil {
			return fmt.Errorf("install the Python module into %s: %w", dir, err)
		}
		if err := os.Rename(final, filepath.Join(old, "copy")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			os.RemoveAll(old)
			return fmt.Errorf("move the incomplete Python module %s aside: %w", final, err)
		}
		defer os.RemoveAll(old)
	}
}

// checkParentDir checks the directory the install directory lives in. It may be a symbolic link the user made (a
// cache moved to another disk); what matters is who can change its entries: it must be a directory, and if
// others may write it, it must have the sticky bit, so that they cannot rename or replace the install directory.
func checkParentDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("the Python module's install directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("the Python module's install directory %s is not a directory (%s): %w", dir, fi.Mode().Type(), ErrUnsafeInstallDir)
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("the Python module's install directory %s is writable by others (mode %s) without the sticky bit, so another user could replace the module: %w; use a directory of yours", dir, fi.Mode().Perm(), ErrUnsafeInstallDir)
	}
	return nil
}

// checkOwnDir checks that fi (from lstat, never following a link) is a real directory owned by uid that nobody
// else can write.
func checkOwnDir(p string, fi fs.FileInfo, uid int) error {
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(p)
		return fmt.Errorf("%s is a symbolic link (to %q), not the directory tpurun installs the Python module into; it is not followed: %w; remove it", p, target, ErrUnsafeInstallDir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (%s): %w; remove it", p, fi.Mode().Type(), ErrUnsafeInstallDir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information: %w", p, ErrUnsafeInstallDir)
	}
	if int(st.Uid) != uid {
		return fmt.Errorf("%s is owned by uid %d, not by this user (uid %d): %w; remove it or use another directory", p, st.Uid, uid, ErrUnsafeInstallDir)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is writable by others (mode %s): %w; remove it", p, fi.Mode().Perm(), ErrUnsafeInstallDir)
	}
	return nil
}

// installed reports whether final holds a complete copy of files (by lstat only: every file there, a regular
// file of the right size), and returns an error wrapping ErrUnsafeInstallDir when final or its package
// directory is not a safe directory of uid. A missing final, or a missing or wrong-sized file, is (false, nil).
func installed(final string, files []pythonFile, uid int) (bool, error) {
	pkg := filepath.Join(final, "tpurun")
	for _, dir := range []string{final, pkg} {
		fi, err := os.Lstat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("the Python module's install directory: %w", err)
		}
		if err := checkOwnDir(dir, fi, uid); err != nil {
			return false, err
		}
	}
	for _, f := range files {
		fi, err := os.Lstat(filepath.Join(pkg, f.name))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(f.data)) {
			return false, nil
		}
	}
	return true, nil
}

// writeCopy writes files into a new private temporary directory in dir, as tmp/tpurun/<name> (mode 0644), and
// returns tmp (mode 0755 once complete). Its files need no atomic writes of their own: tmp is renamed into place
// whole.
func writeCopy(dir string, files []pythonFile) (string, error) {
	tmp, err := os.MkdirTemp(dir, ".python-tmp-")
	if err != nil {
		return "", fmt.Errorf("install the Python module into %s: %w", dir, err)
	}
	fail := func(err error) (string, error) {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("install the Python module into %s: %w", dir, err)
	}
	pkg := filepath.Join(tmp, "tpurun")
	if err := os.Mkdir(pkg, 0o755); err != nil {
		return fail(err)
	}
	for _, f := range files {
		p := filepath.Join(pkg, f.name)
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			return fail(err)
		}
		if err := os.Chmod(p, 0o644); err != nil { // whatever the umask
			return fail(err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fail(err)
	}
	return tmp, nil
}
