package topology

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary act as a helper process that holds a file open (and optionally locked) until its
// stdin closes: a real process for the holder and lockfile tests.
func TestMain(m *testing.M) {
	if os.Getenv("TOPOLOGY_TEST_DETECT") != "" {
		// Detect with the real environment (proxy variables, GCE_METADATA_HOST, TPURUN_*_ROOT) as tpurun would.
		h, err := Detect(context.Background(), Options{Device: "tpu", MetadataBudget: 2 * time.Second}, nil)
		if err != nil {
			fmt.Println("detect:", err)
			os.Exit(5)
		}
		fmt.Println("accelerator", h.tpu().Accelerator.V.Type)
		os.Exit(0)
	}
	if path := os.Getenv("TOPOLOGY_TEST_HOLD"); path != "" {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(3)
		}
		if os.Getenv("TOPOLOGY_TEST_LOCK") != "" {
			lk := syscall.Flock_t{Type: syscall.F_WRLCK}
			if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
				fmt.Println("lock:", err)
				os.Exit(4)
			}
		}
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = f.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeTree is a fake /sys and /dev for one host.
type fakeTree struct {
	sys, dev string
}

// newTree builds n PCI devices of vendor/device under sys and their device nodes (style "accel", "vfio", "nvidia"
// or "") under dev.
func newTree(t *testing.T) fakeTree {
	t.Helper()
	root := t.TempDir()
	ft := fakeTree{sys: filepath.Join(root, "sys"), dev: filepath.Join(root, "dev")}
	must(t, os.MkdirAll(filepath.Join(ft.sys, "bus", "pci", "devices"), 0o755))
	must(t, os.MkdirAll(ft.dev, 0o755))
	return ft
}

func (ft fakeTree) pci(t *testing.T, vendor, device, class string, n int, nodes string) fakeTree {
	t.Helper()
	dir := filepath.Join(ft.sys, "bus", "pci", "devices")
	existing, _ := os.ReadDir(dir)
	base := len(existing)
	for i := 0; i < n; i++ {
		d := filepath.Join(dir, fmt.Sprintf("0000:00:%02x.0", base+i+4))
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, "vendor"), []byte(vendor+"\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(d, "device"), []byte(device+"\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(d, "class"), []byte(class+"\n"), 0o644))
	}
	ft.nodes(t, nodes, n)
	return ft
}

func (ft fakeTree) nodes(t *testing.T, style string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		var p string
		switch style {
		case "accel":
			p = filepath.Join(ft.dev, fmt.Sprintf("accel%d", i))
		case "vfio":
			must(t, os.MkdirAll(filepath.Join(ft.dev, "vfio"), 0o755))
			must(t, os.WriteFile(filepath.Join(ft.dev, "vfio", "vfio"), nil, 0o644))
			p = filepath.Join(ft.dev, "vfio", fmt.Sprint(i))
		case "nvidia":
			p = filepath.Join(ft.dev, fmt.Sprintf("nvidia%d", i))
		default:
			return
		}
		must(t, os.WriteFile(p, nil, 0o644))
	}
}

func (ft fakeTree) tpu(t *testing.T, id string, n int) fakeTree {
	style := "vfio"
	if d, ok := pciDevices[id]; ok {
		style = d.DevNodes
	}
	return ft.pci(t, vendorGoogle, id, "0x120000", n, style)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// envOf turns a map into a LookupEnv.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// startHolder starts the test binary as a helper holding path open (and locked, if lock). It returns the pid; the
// helper exits at test cleanup.
func startHolder(t *testing.T, path string, lock bool) int {
	t.Helper()
	exe, err := os.Executable()
	must(t, err)
	env := append(os.Environ(), "TOPOLOGY_TEST_HOLD="+path)
	if lock {
		env = append(env, "TOPOLOGY_TEST_LOCK=1")
	}
	pr, pw, err := os.Pipe()
	must(t, err)
	outR, outW, err := os.Pipe()
	must(t, err)
	p, err := os.StartProcess(exe, []string{exe, "-test.run=^$"}, &os.ProcAttr{Env: env, Files: []*os.File{pr, outW, os.Stderr}})
	must(t, err)
	_ = pr.Close()
	_ = outW.Close()
	t.Cleanup(func() {
		_ = pw.Close()
		_, _ = p.Wait()
	})
	line, err := bufio.NewReader(outR).ReadString('\n')
	_ = outR.Close()
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("helper did not get ready: %q %v", line, err)
	}
	return p.Pid
}

// shown is what doctor shows of h's own facts (package hostview prints them), one a line: each setting with a
// source as "name value source" and each chip as "chip index device-node".
func shown(h *Host) string {
	var b strings.Builder
	for _, s := range h.Settings() {
		if s.Source.IsSet() {
			fmt.Fprintf(&b, "%s %s %s\n", s.Name, s.Value, s.Source)
		}
	}
	for _, c := range h.Chips() {
		fmt.Fprintf(&b, "chip %d %s\n", c.Index, c.DevNode)
	}
	return b.String()
}
