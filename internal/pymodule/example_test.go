package pymodule_test

import (
	"fmt"
	"os"
	"path/filepath"

	"tpurun/internal/pymodule"
)

// Path installs the embedded Python module (import tpurun) once per version and returns the directory for
// PYTHONPATH; here under a directory of the example's instead of the user's cache.
func ExamplePath() {
	dir, err := os.MkdirTemp("", "tpurun-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	p, err := pymodule.Path(dir, "")
	fmt.Println(err, filepath.Dir(p) == dir, filepath.Base(p) == pymodule.DirName())
	_, err = os.Stat(filepath.Join(p, "tpurun", "__init__.py"))
	fmt.Println(err)
	// Output:
	// <nil> true true
	// <nil>
}
