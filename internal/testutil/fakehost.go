package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// PCIDevices are n alike PCI functions of a fake host, for FakePCIHost: their ids as sysfs shows them ("0x1ae0"
// Google, "0x10de" NVIDIA), the format of their sysfs address with the number it counts from ("0000:00:%02x.0"
// from 4), and the format of their device node under /dev by index ("vfio/%d", "accel%d", "nvidia%d"; "" none).
type PCIDevices struct {
	Vendor, Device, Class string
	Addr                  string
	First                 int
	Node                  string
}

// Google's TPU and NVIDIA's H100 functions as detection finds them (TPU_FACTS.md); set Device for the TPU's kind.
var (
	TPUFunctions  = PCIDevices{Vendor: "0x1ae0", Class: "0x120000", Addr: "0000:00:%02x.0", First: 4, Node: "vfio/%d"}
	H100Functions = PCIDevices{Vendor: "0x10de", Device: "0x2330", Class: "0x030200", Addr: "0000:%02x:00.0", First: 0x18,
		Node: "nvidia%d"}
)

// FakePCIHost builds a fake /sys and /dev of n functions d in a temporary directory and returns the two roots (for
// topology.Options' SysfsRoot and DevRoot, or TPURUN_SYSFS_ROOT and TPURUN_DEV_ROOT).
func FakePCIHost(t testing.TB, d PCIDevices, n int) (sys, dev string) {
	t.Helper()
	root := t.TempDir()
	sys, dev = filepath.Join(root, "sys"), filepath.Join(root, "dev")
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(sys, "bus", "pci", "devices"), 0o755))
	must(os.MkdirAll(dev, 0o755))
	for i := range n {
		f := filepath.Join(sys, "bus", "pci", "devices", fmt.Sprintf(d.Addr, d.First+i))
		must(os.MkdirAll(f, 0o755))
		for name, v := range map[string]string{"vendor": d.Vendor, "device": d.Device, "class": d.Class} {
			must(os.WriteFile(filepath.Join(f, name), []byte(v+"\n"), 0o644))
		}
		if d.Node != "" {
			node := filepath.Join(dev, fmt.Sprintf(d.Node, i))
			must(os.MkdirAll(filepath.Dir(node), 0o755))
			must(os.WriteFile(node, nil, 0o644))
		}
	}
	return sys, dev
}
