package launcher_test

import (
	"context"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReadmeLibraryExample builds and runs the README's Go blocks as written, as a program of a module of its own
// that depends on this checkout the way the README says (require tpurun v0.0.0, replace tpurun => the checkout):
// what a user outside the module can compile, with no internal package. The build is offline: GOPROXY=off, the
// checkout's go.sum, and the module cache that built the checkout. Not parallel: it waits for its commands, whose
// ends a parallel test's reaper (Process.Reap) would take.
func TestReadmeLibraryExample(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go block")
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mustRead(t, filepath.Join(root, "go.mod")))
	if goVersion == nil {
		t.Fatal("go.mod has no go line")
	}
	for i, b := range blocks {
		src := b[1]
		if formatted, err := format.Source(src); err != nil || string(formatted) != string(src) {
			t.Errorf("README Go block %d is not gofmt'ed (err %v):\n%s", i, err, formatted)
		}
		dir := t.TempDir()
		gomod := "module example.com/readme\n\ngo " + string(goVersion[1]) + "\n\nrequire tpurun v0.0.0\n\nreplace tpurun => " + root + "\n"
		for name, body := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": mustRead(t, filepath.Join(root, "go.sum")), "main.go": src} {
			if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		bin := filepath.Join(dir, "example")
		build := exec.Command("go", "build", "-o", bin, ".")
		build.Dir = dir
		build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("README Go block %d does not build outside the module: %v\n%s\n%s", i, err, out, src)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin).CombinedOutput()
		if err != nil {
			t.Fatalf("README Go block %d: the program failed: %v\n%s", i, err, out)
		}
		for _, want := range []string{"[0] rank 0 of 2", "[1] rank 1 of 2", "attempt 0 ended: done", "2 ranks, verdict done"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("README Go block %d printed no %q:\n%s", i, want, out)
			}
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
