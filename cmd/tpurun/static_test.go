package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"tpurun/internal/testutil"
)

// TestBuildIsStatic: `make build` gives static binaries (tpurun, tpurun-etcd, hello: no program interpreter, no
// shared library), and tpurun runs in an empty root that holds nothing but itself, as in a distroless image. Linked
// to this machine's glibc (the go command's default where a C compiler is installed), it failed there with "no such
// file or directory".
func TestBuildIsStatic(t *testing.T) {
	t.Parallel()
	testutil.Need(t, "make")
	out := t.TempDir()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("make", "-s", "-C", root, "build", "BIN="+out).CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, b)
	}
	for _, name := range []string{"tpurun", "tpurun-etcd", "hello"} {
		f, err := elf.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has a program interpreter: it is linked dynamically", name)
			}
		}
		if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
			t.Errorf("%s needs shared libraries %v (%v)", name, libs, err)
		}
		f.Close()
	}
	testutil.Need(t, "root") // chroot
	jail := t.TempDir()
	b, err := os.ReadFile(filepath.Join(out, "tpurun"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(jail, "tpurun"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/tpurun", "--version")
	cmd.Dir = "/"
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: jail}
	got, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(got), "tpurun ") {
		t.Fatalf("tpurun --version in an empty root: %v\n%s", err, got)
	}
}
