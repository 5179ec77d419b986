package preload

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
)

// python is the interpreter's own code, stdlib only: the fork server (serverScript, which documents the messages
// of the control socket) and the native thread pools it sizes before the imports, which it runs by path.
//
//go:embed preload.py pools.py
var python embed.FS

// serverScript is the file the interpreter runs.
const serverScript = "preload.py"

// scripts writes the interpreter's code into a new private directory (mode 0700, below $TMPDIR) and returns it;
// the caller removes it once the interpreter has ended.
func scripts() (string, error) {
	dir, err := os.MkdirTemp("", "tpurun-preload-")
	if err != nil {
		return "", fmt.Errorf("a directory for the preloaded interpreter's code: %w; set TMPDIR", err)
	}
	for _, name := range []string{serverScript, "pools.py"} {
		b, err := python.ReadFile(name)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), b, 0o600)
		}
		if err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("write the preloaded interpreter's code into %s: %w", dir, err)
		}
	}
	return dir, nil
}
