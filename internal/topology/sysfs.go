package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// PCI vendor ids.
const (
	vendorGoogle = "0x1ae0"
	vendorNVIDIA = "0x10de"
)

// Chip is one accelerator chip (TPU or GPU) found on this host.
type Chip struct {
	Index    int    `json:"index"`               // chip index: TPU_VISIBLE_CHIPS / CUDA_VISIBLE_DEVICES value
	PCI      string `json:"pci,omitempty"`       // PCI address, e.g. 0000:00:04.0
	DeviceID string `json:"device_id,omitempty"` // PCI device id, e.g. 0x005e
	DevNode  string `json:"dev_node,omitempty"`  // the device node a holder opens, e.g. /dev/vfio/0
}

// pciScan is what the sysfs PCI scan found.
type pciScan struct {
	dir     string
	tpus    []Chip
	family  string // family of the TPUs ("v4", "v2/v3", ...), "" if none or unknown ids
	unknown []string
	google  int // Google PCI devices seen
	gpus    []Chip
}

// scanPCI reads <sysfsRoot>/bus/pci/devices/*/{vendor,device,class}. A missing directory is not an error (containers
// often hide it); an unreadable entry is skipped.
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
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names) // PCI address order = chip index order
	families := map[string]bool{}
	for _, name := range names {
		switch strings.ToLower(readTrim(filepath.Join(dir, name, "vendor"))) {
		case vendorGoogle:
			s.addGoogle(name, families)
		case vendorNVIDIA:
			s.addNVIDIA(name)
		}
	}
	for i := range s.tpus {
		s.tpus[i].Index = i
	}
	for i := range s.gpus {
		s.gpus[i].Index = i
	}
	if len(families) == 1 && len(s.unknown) == 0 {
		for f := range families {
			s.family = f
		}
	}
	return s, nil
}

// addGoogle adds a Google PCI device: a TPU chip, whose family it notes, or one of unknown device id.
func (s *pciScan) addGoogle(name string, families map[string]bool) {
	s.google++
	id := strings.ToLower(readTrim(filepath.Join(s.dir, name, "device")))
	s.tpus = append(s.tpus, Chip{PCI: name, DeviceID: id})
	if d, ok := pciDevices[id]; ok {
		families[d.Family] = true
	} else if !slices.Contains(s.unknown, id) {
		s.unknown = append(s.unknown, id)
	}
}

// addNVIDIA adds an NVIDIA PCI function that is a GPU: only display/3D controllers (class 0x03xxxx) are; the same
// card also shows audio and USB functions.
func (s *pciScan) addNVIDIA(name string) {
	class := readTrim(filepath.Join(s.dir, name, "class"))
	if class != "" && !strings.HasPrefix(strings.ToLower(class), "0x03") {
		return
	}
	s.gpus = append(s.gpus, Chip{PCI: name, DeviceID: strings.ToLower(readTrim(filepath.Join(s.dir, name, "device")))})
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// devNodes lists numbered device nodes: /dev/accelN ("accel"), /dev/vfio/N ("vfio", never /dev/vfio/vfio), or
// /dev/nvidiaN ("nvidia"), sorted by number.
func devNodes(devRoot, style string) []string {
	var dir, prefix string
	switch style {
	case "accel":
		dir, prefix = devRoot, "accel"
	case "vfio":
		dir, prefix = filepath.Join(devRoot, "vfio"), ""
	case "nvidia":
		dir, prefix = devRoot, "nvidia"
	default:
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	type node struct {
		n    int
		path string
	}
	var nodes []node
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		num := name[len(prefix):]
		if !isDigits(num) {
			continue
		}
		n, err := strconv.Atoi(num)
		if err != nil {
			continue
		}
		nodes = append(nodes, node{n, filepath.Join(dir, name)})
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].n < nodes[j].n })
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.path
	}
	return out
}
