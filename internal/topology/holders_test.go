package topology

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestHolders: a real process (the test binary as a helper) holds a fake device node open; Holders finds its pid and
// command, CheckFree refuses the launch naming it, and doctor shows it.
func TestHolders(t *testing.T) {
	t.Parallel()
	ft := newTree(t).tpu(t, "0x006f", 4)
	node := filepath.Join(ft.dev, "vfio", "2")
	pid := startHolder(t, node, false)

	hs, err := Holders("/proc", []string{node, filepath.Join(ft.dev, "vfio", "0")})
	must(t, err)
	if len(hs) != 1 || hs[0].PID != pid || hs[0].Path != node || !strings.Contains(hs[0].Command, "topology.test") {
		t.Fatalf("holders %+v, want pid %d holding %s", hs, pid, node)
	}

	h, err := Detect(context.Background(), Options{LookupEnv: envOf(map[string]string{"TPU_ACCELERATOR_TYPE": "v6e-4"}), SysfsRoot: ft.sys, DevRoot: ft.dev})
	must(t, err)
	err = h.CheckFree()
	var be *BusyError
	if !errors.Is(err, ErrChipBusy) || !errors.As(err, &be) || be.Holders[0].PID != pid {
		t.Fatalf("CheckFree = %v", err)
	}
	if !strings.Contains(err.Error(), "pid "+strconv.Itoa(pid)) || !strings.Contains(err.Error(), "--force") {
		t.Errorf("message %q", err)
	}

	md := newMD(t, map[string]string{KeyAcceleratorType: "v6e-4"}, nil)
	d := Diagnose(context.Background(), h, Options{MetadataURL: md.URL}, filepath.Join(t.TempDir(), "libtpu_lockfile"))
	var out bytes.Buffer
	must(t, WriteDoctor(&out, d))
	js, err := json.Marshal(d)
	if err != nil || !strings.Contains(string(js), `"pid":`+strconv.Itoa(pid)) || !strings.Contains(string(js), `"v6e-4"`) {
		t.Errorf("doctor json %s: %v", js, err)
	}
	for _, s := range []string{"accelerator type", "v6e-4", "env TPU_ACCELERATOR_TYPE", node, "pid " + strconv.Itoa(pid), "lockfile", "absent", "reachable"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("doctor output lacks %q:\n%s", s, out.String())
		}
	}
}

func TestHoldersNone(t *testing.T) {
	t.Parallel()
	ft := newTree(t).tpu(t, "0x006f", 1)
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(nil), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: noMD(t)})
	must(t, err)
	if err := h.CheckFree(); err != nil {
		t.Fatal(err)
	}
}

// TestLockfile: a real helper process holds a lockf on the lockfile: held, with its pid; after it exits, stale.
func TestLockfile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "libtpu_lockfile")
	st, err := Lockfile("/proc", path)
	must(t, err)
	if st.Exists || st.Held {
		t.Fatalf("absent lockfile: %+v", st)
	}
	must(t, os.WriteFile(path, nil, 0o644))
	st, err = Lockfile("/proc", path)
	must(t, err)
	if !st.Exists || st.Held || !st.Stale {
		t.Fatalf("unlocked lockfile: %+v", st)
	}
	pid := startHolder(t, path, true)
	st, err = Lockfile("/proc", path)
	must(t, err)
	if !st.Held || st.PID != pid || st.Stale {
		t.Fatalf("locked lockfile: %+v, want held by %d", st, pid)
	}
	// Without /proc/locks the kernel is asked directly (F_GETLK).
	st, err = Lockfile(t.TempDir(), path)
	must(t, err)
	if !st.Held || st.PID != pid {
		t.Fatalf("F_GETLK: %+v, want held by %d", st, pid)
	}
}

func TestPortHolderNone(t *testing.T) {
	t.Parallel()
	if _, _, err := PortHolder("/proc", 1); err == nil {
		t.Fatal("port 1 has a holder?")
	}
}
