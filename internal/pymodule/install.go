package pymodule

import (
	"fmt"
	"os"
	"path/filepath"
)

// Install writes the Python package into dir (created if needed) as dir/tpurun/*.py and returns dir, the
// directory to put on PYTHONPATH. Files are written to a temporary name and renamed, so a concurrent reader never
// sees a half-written module.
func Install(dir string) (string, error) {
	m, err := embeddedModule()
	if err != nil {
		return "", fmt.Errorf("the embedded Python module: %w", err)
	}
	pkg := filepath.Join(dir, "tpurun")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		return "", fmt.Errorf("install the tpurun Python module: %w", err)
	}
	for _, f := range m.files {
		if err := writeFile(pkg, f); err != nil {
			return "", fmt.Errorf("install the tpurun Python module into %s: %w", pkg, err)
		}
	}
	return dir, nil
}

// writeFile writes f into dir under a temporary name (mode 0644) and renames it into place.
func writeFile(dir string, f pythonFile) error {
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(f.data)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, f.name))
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
