package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Chip is one accelerator chip (TPU or GPU) found on this host.
type Chip struct {
	Index    int    `json:"index"`               // chip index: TPU_VISIBLE_CHIPS / CUDA_VISIBLE_DEVICES value
	PCI      string `json:"pci,omitempty"`       // PCI address, e.g. 0000:00:04.0
	DeviceID string `json:"device_id,omitempty"` // PCI device id, e.g. 0x005e
	DevNode  string `json:"dev_node,omitempty"`  // the device node a holder opens, e.g. /dev/vfio/0
}

// pciFunction is one PCI function as sysfs shows it: its address and its vendor, device and class ids (lower case).
type pciFunction struct {
	addr, vendor, device, class string
}

// pciScan is every PCI function of the host, in PCI address order; each kind picks its own out of it (chips).
type pciScan struct {
	dir   string
	funcs []pciFunction
}

// scanPCI reads <sysfsRoot>/bus/pci/devices/*/{vendor,device,class}; a missing directory (containers often hide
// it) is none, an unreadable entry skipped.
func scanPCI(sysfsRoot string) (pciScan, error) {
	dir := filepath.Join(sysfsRoot, "bus", "pci", "devices")
	s := pciScan{dir: dir}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("scan PCI devices in %s: %w", dir, err)
	}
	for _, e := range entries { // os.ReadDir sorts by name: PCI address order = chip index order
		name := e.Name()
		vendor := strings.ToLower(readTrim(filepath.Join(dir, name, "vendor")))
		if vendor == "" {
			continue
		}
		s.funcs = append(s.funcs, pciFunction{addr: name, vendor: vendor,
			device: strings.ToLower(readTrim(filepath.Join(dir, name, "device"))),
			class:  strings.ToLower(readTrim(filepath.Join(dir, name, "class")))})
	}
	return s, nil
}

// chips are the functions a kind's match accepts, as chips indexed in PCI address order.
func (s pciScan) chips(match func(pciFunction) bool) []Chip {
	var out []Chip
	for _, f := range s.funcs {
		if match(f) {
			out = append(out, Chip{Index: len(out), PCI: f.addr, DeviceID: f.device})
		}
	}
	return out
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// numberedNodes lists the device nodes in dir named prefix and a number (/dev/accelN; /dev/vfio/N with prefix ""),
// sorted by number.
func numberedNodes(dir, prefix string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	byNumber := map[int]string{}
	for _, e := range entries {
		num, ok := strings.CutPrefix(e.Name(), prefix)
		if n, err := strconv.Atoi(num); ok && isDigits(num) && err == nil {
			byNumber[n] = filepath.Join(dir, e.Name())
		}
	}
	var out []string
	for _, n := range slices.Sorted(maps.Keys(byNumber)) {
		out = append(out, byNumber[n])
	}
	return out
}
