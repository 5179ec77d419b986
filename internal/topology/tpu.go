package topology

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// TPU is the kind of a Cloud TPU host: chips of one slice, run through PJRT's TPU client (libtpu).
const TPU Device = "tpu"

func init() { register(tpu{}) }

// vendorGoogle is the PCI vendor id of TPU chips.
const vendorGoogle = "0x1ae0"

// tpuTable is the one table of TPU generations (TPU_FACTS.md, which marks the unverified entries); families and
// pciDevices index it.
var tpuTable = []Family{
	{Name: "v2", Version: 2, CountsCores: true, ReplicasPerChip: 2, MaxSingleHost: 4, ChipsPerHost: 4, DevNodes: "accel", PCIID: "0x0027"},
	{Name: "v3", Version: 3, CountsCores: true, ReplicasPerChip: 2, MaxSingleHost: 4, ChipsPerHost: 4, DevNodes: "accel", PCIID: "0x0027"},
	{Name: "v4", Version: 4, CountsCores: true, ReplicasPerChip: 1, ThreeD: true, MaxSingleHost: 4, ChipsPerHost: 4, DevNodes: "accel", PCIID: "0x005e"},
	{Name: "v5litepod", Version: 5, ReplicasPerChip: 1, MaxSingleHost: 8, ChipsPerHost: 4, DevNodes: "vfio", PCIID: "0x0063"},
	{Name: "v5p", Version: 5, CountsCores: true, ReplicasPerChip: 1, ThreeD: true, MaxSingleHost: 4, ChipsPerHost: 4, DevNodes: "vfio", PCIID: "0x0062"},
	{Name: "v6e", Version: 6, ReplicasPerChip: 1, MaxSingleHost: 8, ChipsPerHost: 4, DevNodes: "vfio", PCIID: "0x006f"},
	{Name: "tpu7x", Version: 7, CountsCores: true, ReplicasPerChip: 2, ThreeD: true, MaxSingleHost: 4, ChipsPerHost: 4, DevNodes: "vfio", PCIID: "0x0076"},
	{Name: "tpu8i", Version: 8, ReplicasPerChip: 1, ThreeD: true, MaxSingleHost: 4, ChipsPerHost: 4, DevNodes: "vfio", PCIID: "0x0083"},
	{Name: "tpu8t", Version: 8, ReplicasPerChip: 1, ThreeD: true, MaxSingleHost: 4, ChipsPerHost: 4, DevNodes: "vfio", PCIID: "0x007c"},
	{Name: "test", ReplicasPerChip: 1, DevNodes: "vfio", PCIID: "0x0056", NoType: true},
}

// familyAliases maps other spellings seen in the wild to the canonical family name.
var familyAliases = map[string]string{"v5e": "v5litepod", "v5lite": "v5litepod", "v6": "v6e", "v7x": "tpu7x", "tpu-v6e": "v6e"}

// families index tpuTable by accelerator-type name; pciDevices by PCI device id, each id's first row named after
// every row with that id ("v2/v3": such rows agree on the replicas per chip and the device nodes).
var families, pciDevices = indexTPUTable(tpuTable)

func indexTPUTable(rows []Family) (byName, byID map[string]Family) {
	byName, byID = map[string]Family{}, map[string]Family{}
	for _, f := range rows {
		if !f.NoType {
			byName[f.Name] = f
		}
		if d, seen := byID[f.PCIID]; seen {
			d.Name += "/" + f.Name
			f = d
		}
		byID[f.PCIID] = f
	}
	return byName, byID
}

// tpuScan is what the PCI scan says of TPU chips (every Google function is one), their family when all are of one
// known generation, and the unknown device ids.
type tpuScan struct {
	chips   []Chip
	family  string
	unknown []string
}

func scanTPUs(scan pciScan) tpuScan {
	t := tpuScan{chips: scan.chips(func(f pciFunction) bool { return f.vendor == vendorGoogle })}
	seen := map[string]bool{}
	for _, c := range t.chips {
		if d, ok := pciDevices[c.DeviceID]; ok {
			seen[d.Name] = true
		} else if !slices.Contains(t.unknown, c.DeviceID) {
			t.unknown = append(t.unknown, c.DeviceID)
		}
	}
	if len(seen) == 1 && len(t.unknown) == 0 {
		for f := range seen {
			t.family = f
		}
	}
	return t
}

// tpuNodes lists the TPU device nodes of a style: /dev/accelN ("accel") or /dev/vfio/N ("vfio").
func tpuNodes(devRoot, style string) []string {
	switch style {
	case "accel":
		return numberedNodes(devRoot, "accel")
	case "vfio":
		return numberedNodes(filepath.Join(devRoot, "vfio"), "")
	}
	return nil
}

// DefaultLockfile is where libtpu takes its lockf when one process uses all chips.
const DefaultLockfile = "/tmp/libtpu_lockfile"

// TPUFacts are what detection finds on a TPU host (Host's state): the chips (PCI address order) and the slice,
// which decide how torch_xla and JAX in its workers see it (what doctor explains).
type TPUFacts struct {
	Chips       []Chip             `json:"chips,omitempty"`
	ChipsSource Source             `json:"chips_source"`
	Family      string             `json:"family,omitempty"` // "v4", "v5litepod", "v2/v3", ...
	Accelerator Value[Accelerator] `json:"accelerator"`
	// Usable are the chip indices this launcher may use: every chip, or the parent's TPU_VISIBLE_CHIPS, limited
	// to the first TPU_NUM_DEVICES.
	Usable             Value[[]int]    `json:"usable"`
	NumDevices         Value[int]      `json:"num_devices"`   // TPU_NUM_DEVICES, when set
	VisibleChips       Value[[]int]    `json:"visible_chips"` // the parent's TPU_VISIBLE_CHIPS, when set
	HostBounds         Value[Bounds]   `json:"host_bounds"`
	ChipsPerHostBounds Value[Bounds]   `json:"chips_per_host_bounds"`
	ProcessBounds      Value[Bounds]   `json:"process_bounds"` // only when given (env or metadata)
	WorkerID           Value[int]      `json:"worker_id"`
	Hostnames          Value[[]string] `json:"hostnames"`
	// Megascale holds MEGASCALE_* values given by env or tpu-env, copied to every worker.
	Megascale map[string]Value[string] `json:"megascale,omitempty"`
	// SkipMDS is the parent's non-empty TPU_SKIP_MDS_QUERY (GKE sets "true"), which the workers keep.
	SkipMDS Value[string] `json:"skip_mds"`
	// TorchXLAMetadata reports that the metadata server answered everything torch_xla's topology code reads from
	// it (torchXLAReads; endpoints as name:uid:ip), so that workers may read the slice from it (docs/TOPOLOGY.md).
	TorchXLAMetadata bool `json:"torch_xla_metadata"`
	// HostnameEndpoints reports that worker-network-endpoints listed host names only, which torch_xla cannot read.
	HostnameEndpoints bool `json:"hostname_endpoints,omitempty"`
}

// tpu is the host's TPU state (stateOf).
func (h *Host) tpu() *TPUFacts { return stateOf[TPUFacts](h) }

// AcceleratorType is the TPU slice's accelerator type ("v4-16"), "" when none is known (and on other kinds).
func (h *Host) AcceleratorType() string { return h.tpu().Accelerator.V.Type }

// Megascale are the multislice values (MEGASCALE_*) env or tpu-env gave a TPU host, by name; nil elsewhere.
func (h *Host) Megascale() map[string]Value[string] { return h.tpu().Megascale }

// TPUFacts are a copy of the host's TPU facts (sharing their slices and map: read them only); the zero value on
// another kind.
func (h *Host) TPUFacts() TPUFacts { return *h.tpu() }

// tpu is the TPU kind: the hosts of a world are one slice (or several), planned as torch_xla and JAX expect
// (docs/TOPOLOGY.md).
type tpu struct{}

func (tpu) Device() Device         { return TPU }
func (tpu) PerCore() bool          { return false }
func (tpu) FixedSlice() bool       { return true }
func (tpu) JAXCoordinator() bool   { return false }
func (tpu) NCCL() bool             { return false }
func (tpu) preference() int        { return 2 }
func (tpu) pjrt() []string         { return []string{"TPU"} }
func (tpu) aliases() []string      { return nil }
func (tpu) devices(h *Host) []Chip { return h.tpu().Chips }

// perRank are the chip and the process of one worker within the slice (Slice.Plan).
func (tpu) perRank() []string {
	return []string{"TPU_VISIBLE_CHIPS", "TPU_PROCESS_PORT", "TPU_PROCESS_ADDRESSES", "CLOUD_TPU_TASK_ID"}
}

// devNodeGlobs: /dev/accelN (v2-v4) and everything under /dev/vfio (v5e and later, the control node too).
func (tpu) devNodeGlobs() []string { return []string{"accel*", "vfio/*"} }

// claim finds Google PCI devices in sysfs, else /dev/accelN.
func (tpu) claim(d *detector, scan pciScan) (Value[Device], bool) {
	switch {
	case len(scanTPUs(scan).chips) > 0:
		return val(TPU, Sysfs(scan.dir)), true
	case len(tpuNodes(d.h.DevRoot, "accel")) > 0:
		return val(TPU, Dev(d.h.DevRoot+"/accel*")), true
	}
	return Value[Device]{}, false
}

// nodes are the slice's host list and this host's worker id, else a batch scheduler's node list.
func (tpu) nodes(d *detector) {
	h, t := d.h, d.h.tpu()
	if t.Hostnames.IsSet() || t.WorkerID.IsSet() {
		h.NodeHosts, h.NodeRank = t.Hostnames, t.WorkerID
		return
	}
	d.slurmNodes()
}

// plan validates and builds the slice plan.
func (tpu) plan(h *Host, req Request) (*Plan, error) {
	s, err := h.Slice(req)
	if err != nil {
		return nil, err
	}
	return s.Plan(), nil
}

// localWorkers plans a slice of nnodes hosts (or the detected slice's) and counts the first host's workers: every
// host of a slice runs the same.
func (tpu) localWorkers(h *Host, req Request, nnodes, numSlices int) (int, error) {
	n := nnodes
	if numSlices > 1 {
		n /= numSlices // hosts per slice: each slice is planned on its own
	}
	if n < 1 && h.tpu().Hostnames.IsSet() {
		n = len(h.tpu().Hostnames.V)
	}
	n = max(n, 1)
	pr := req
	pr.Hosts, pr.NodeRank = make([]string, n), 0
	for i := range pr.Hosts {
		pr.Hosts[i] = "node" + strconv.Itoa(i)
	}
	p, err := NewPlan(h, pr, World{})
	if err != nil {
		return 0, err
	}
	return len(p.Local(0)), nil
}

// worldPlan plans the slice whose hosts are the world's nodes in node order, or multisliceWorld.
func (tpu) worldPlan(h *Host, req Request, w World) (*Plan, error) {
	if w.NumSlices > 1 {
		return multisliceWorld(h, req, w)
	}
	req.Hosts, req.NodeRank = w.addrs(), w.NodeRank
	return NewPlan(h, req, World{})
}

// soloNode is TPU_WORKER_ID on an env- or metadata-described multi-host slice, else 0; 0 too for a one-chip run.
func (tpu) soloNode(h *Host, req Request) int {
	if !h.tpu().Hostnames.IsSet() || (req.NProcs == 1 && !req.SPMD && !h.SPMD.V && req.Hosts == nil) {
		return 0
	}
	return h.tpu().WorkerID.V
}

// usableNodes are the device nodes of the usable chips.
func (tpu) usableNodes(h *Host) []string {
	t := h.tpu()
	var paths []string
	for _, i := range t.Usable.V {
		if i < len(t.Chips) && t.Chips[i].DevNode != "" {
			paths = append(paths, t.Chips[i].DevNode)
		}
	}
	return paths
}

// settings are the chips and the slice description, each with its source, then the multislice values.
func (tpu) settings(h *Host) []Setting {
	t := h.tpu()
	out := []Setting{{"accelerator type", t.Accelerator.V.Type, t.Accelerator.Source}}
	if t.Family != "" {
		out = append(out, Setting{"family", t.Family, t.ChipsSource})
	}
	out = append(out,
		Setting{"chips on host", fmt.Sprint(len(t.Chips)), t.ChipsSource},
		Setting{"usable chips", counted(len(t.Usable.V), "chip", t.Usable.V), t.Usable.Source},
		Setting{"TPU_NUM_DEVICES", fmt.Sprint(t.NumDevices.V), t.NumDevices.Source},
		Setting{"TPU_VISIBLE_CHIPS (parent)", joinInts(t.VisibleChips.V, ","), t.VisibleChips.Source},
		Setting{"host bounds", t.HostBounds.V.String(), t.HostBounds.Source},
		Setting{"chips per host bounds", t.ChipsPerHostBounds.V.String(), t.ChipsPerHostBounds.Source},
		Setting{"process bounds", t.ProcessBounds.V.String(), t.ProcessBounds.Source},
		Setting{"worker id", fmt.Sprint(t.WorkerID.V), t.WorkerID.Source},
		Setting{"worker hostnames", strings.Join(t.Hostnames.V, ","), t.Hostnames.Source},
		spmdSetting(h),
		Setting{"TPU_SKIP_MDS_QUERY (parent)", t.SkipMDS.V, t.SkipMDS.Source})
	for _, k := range slices.Sorted(maps.Keys(t.Megascale)) {
		v := t.Megascale[k]
		out = append(out, Setting{k, v.V, v.Source}) // a secret's value is the printer's to hide
	}
	return out
}

// probe asks the metadata server (within opts.MetadataBudget) whether it answers.
func (tpu) probe(ctx context.Context, h *Host, opts Options, log *zap.Logger) *Probe {
	base := opts.MetadataURL
	if base == "" && opts.LookupEnv != nil {
		base, _ = opts.LookupEnv("GCE_METADATA_HOST")
	}
	p := ProbeMetadata(ctx, NewMetadataClient(base, opts.MetadataBudget, log))
	return &p
}
