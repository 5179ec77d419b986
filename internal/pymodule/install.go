package pymodule

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"tpurun/worker/python"
)

// Install writes the Python package into dir (created if needed) as dir/tpurun/*.py and returns dir, the
// directory to put on PYTHONPATH. Files are written to a temporary name and renamed, so a concurrent reader never
// sees a half-written module.
func Install(dir string) (string, error) {
	pkg := filepath.Join(dir, "tpurun")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		return "", fmt.Errorf("install the tpurun Python module: %w", err)
	}
	err := fs.WalkDir(python.Files, "tpurun", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := python.Files.ReadFile(p)
		if err != nil {
			return err
		}
		dst := filepath.Join(pkg, filepath.Base(p))
		tmp, err := os.CreateTemp(pkg, ".tmp-*")
		if err != nil {
			return err
		}
		if _, err := tmp.Write(b); err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			return err
		}
		if err := tmp.Chmod(0o644); err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			return err
		}
		if err := tmp.Close(); err != nil {
			os.Remove(tmp.Name())
			return err
		}
		return os.Rename(tmp.Name(), dst)
	})
	if err != nil {
		return "", fmt.Errorf("install the tpurun Python module into %s: %w", pkg, err)
	}
	return dir, nil
}
