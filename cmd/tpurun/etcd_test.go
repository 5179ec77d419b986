//go:build !etcd

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEtcdLeftOutOfTpurun: the default build links no package of the etcd client (go version -m lists the modules a
// binary was built from), tpurun-etcd, built beside it with -tags etcd, does; --help of each names the etcd
// backend, and tpurun-etcd's names it as the rendezvous registry does: by the names that tpurun hands off.
func TestEtcdLeftOutOfTpurun(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{"tpurun": false, "tpurun-etcd": true} {
		out, err := exec.Command("go", "version", "-m", filepath.Join(bin, name)).CombinedOutput()
		if err != nil {
			t.Fatalf("go version -m %s: %v\n%s", name, err, out)
		}
		if got := strings.Contains(string(out), "go.etcd.io/"); got != want {
			t.Errorf("%s links the etcd client: %v, want %v\n%s", name, got, want, out)
		}
		if got := strings.Contains(string(out), "build\t-tags=etcd"); got != want {
			t.Errorf("%s built with -tags etcd: %v, want %v\n%s", name, got, want, out)
		}
	}
	registered := "etcd (" + strings.Join(etcdBackends[1:], ", ") + ")"
	for name, want := range map[string]string{"tpurun": registered[:len(registered)-1] + "; run by tpurun-etcd)", "tpurun-etcd": registered} {
		help, err := exec.Command(filepath.Join(bin, name), "--help").Output()
		if err != nil {
			t.Fatalf("%s --help: %v", name, err)
		}
		if !strings.Contains(string(help), "multi-host rendezvous: "+want+", ") {
			t.Errorf("%s --help does not name the etcd backend as %q:\n%s", name, want, help)
		}
	}
}

// TestEtcdHandedOff: asked for the etcd backend (--rdzv-backend, or PET_RDZV_BACKEND, by either name), tpurun runs
// the tpurun-etcd beside its own executable in its place, with the same arguments and environment: here a script
// that prints them; with the real one, an etcd-only setting's error proves it ran. Other backends stay.
func TestEtcdHandedOff(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lean := copyBinary(t, dir)
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\"\necho \"probe=$HANDOFF_PROBE\"\nexit 7\n"
	if err := os.WriteFile(filepath.Join(dir, "tpurun-etcd"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  []string
		args []string
	}{
		{nil, []string{"--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "e:2379", "--", "prog", "x"}},
		{[]string{"PET_RDZV_BACKEND=etcd-v2"}, []string{"--nnodes=2", "prog"}},
	} {
		cmd := exec.Command(lean, tc.args...)
		cmd.Env = append(append(os.Environ(), "HANDOFF_PROBE=kept"), tc.env...)
		out, err := cmd.Output()
		want := strings.Join(tc.args, "\n") + "\nprobe=kept\n"
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 || string(out) != want {
			t.Errorf("tpurun %q (env %q): %v, printed %q; want tpurun-etcd's exit 7 and %q", tc.args, tc.env, err, out, want)
		}
	}
	// The real tpurun-etcd: the CA certificate is read by the etcd backend alone (tpurun without it would refuse
	// the backend as unknown).
	r := runCLI(t, t.TempDir(), nil, "--device", "cpu", "--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint",
		"https://127.0.0.1:9", "--rdzv-conf", "cacert=/nonexistent/ca.pem", "true")
	if r.code != 2 || !strings.Contains(r.stderr, "cannot read the CA certificate") {
		t.Errorf("tpurun on etcd with a missing CA certificate: exit %d, stderr %q; want 2 from the etcd backend", r.code, r.stderr)
	}
	// Not handed off: the tcp backend runs in tpurun (a script that exits 7 would say otherwise).
	if out, err := exec.Command(lean, "--nnodes", "2", "--rdzv-backend", "tcp", "--rdzv-endpoint", "127.0.0.1:9", "--rdzv-conf", "bogus=1", "true").CombinedOutput(); !strings.Contains(string(out), "bogus") {
		t.Errorf("tpurun on tcp with a bad option: %v, %q; want tpurun's own refusal", err, out)
	}
}

// TestEtcdMissingBinary: without tpurun-etcd beside it, tpurun asked for etcd exits 2 before anything starts,
// saying what it lacks and how to get it.
func TestEtcdMissingBinary(t *testing.T) {
	t.Parallel()
	lean := copyBinary(t, t.TempDir())
	out, err := exec.Command(lean, "--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "e:2379", "true").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("tpurun --rdzv-backend etcd without tpurun-etcd: %v, want exit 2\n%s", err, out)
	}
	for _, want := range []string{filepath.Join(filepath.Dir(lean), "tpurun-etcd") + ": no such file", "make build", "go build -tags etcd", "wheel"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("tpurun --rdzv-backend etcd without tpurun-etcd says %q, want %q in it", out, want)
		}
	}
}

// copyBinary copies the tpurun the tests built into dir (os.Executable follows a symbolic link: a copy is found
// there) and returns its path.
func copyBinary(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(bin, "tpurun"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "tpurun")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
