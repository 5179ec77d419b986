package topology

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/setting"
)

// Device names a kind of accelerator as --device, --nproc-per-node and the plan's JSON spell it: "cpu", "gpu",
// "tpu". Its Kind says everything else about it.
type Device string

// A Kind is one kind of accelerator: how detection finds it on a host, what its workers are told, which device
// nodes its holders open and what doctor shows of it. Each accelerator kind is one file (gpu.go, tpu.go; the CPU
// kind, the default, is below) that registers it once; this file is the only one that looks kinds up, and nothing
// outside the package names one.
type Kind interface {
	// Device is the kind's name.
	Device() Device
	// PerCore reports whether the kind runs on the host's CPU cores, so that torchrun's --nproc-per-node cpu (or
	// auto) means one worker per core.
	PerCore() bool
	// FixedSlice reports whether the hosts of a world are one slice of chips: every host runs the same workers,
	// and one launcher owns each host. Otherwise nodes may run different numbers of workers and share a host.
	FixedSlice() bool
	// JAXCoordinator reports whether the workers need JAX_COORDINATOR_ADDRESS from the launcher (on a TPU slice
	// JAX's cloud-TPU detection finds host 0 itself).
	JAXCoordinator() bool
	// NCCL reports whether the workers' collectives run on NCCL (CUDA GPUs), whose asynchronous error handling the
	// launcher turns on as torchrun does.
	NCCL() bool

	// preference orders auto detection: kinds present on the host are tried from the highest preference down.
	preference() int
	// pjrt lists the PJRT_DEVICE spellings (upper case) that select the kind; the first is what workers get.
	pjrt() []string
	// aliases lists --device spellings other than the name.
	aliases() []string
	// claim reports whether auto detection finds the kind on the host, and the device the host then runs on.
	claim(d *detector, scan pciScan) (Value[Device], bool)
	// detect fills in the host's devices of the kind.
	detect(ctx context.Context, d *detector) error
	// nodes fills in Host.NodeHosts and Host.NodeRank.
	nodes(d *detector)
	// plan is NewPlan for a host of the kind.
	plan(h *Host, req Request) (*Plan, error)
	// localWorkers is LocalWorkers for a host of the kind.
	localWorkers(h *Host, req Request, nnodes, numSlices int) (int, error)
	// worldPlan is WorldPlan for a host of the kind in a world of several nodes.
	worldPlan(h *Host, req Request, w World) (*Plan, error)
	// soloNode is SoloNode for a host of the kind.
	soloNode(h *Host, req Request) int
	// devices are the host's devices of the kind, for doctor.
	devices(h *Host) []Chip
	// usableNodes are the device nodes of the devices this launcher may use: a start refuses to go on while
	// another process holds one open.
	usableNodes(h *Host) []string
	// explain is Explain for a host of the kind.
	explain(h *Host, req Request) []string
	// settings are doctor's rows of the host after the device.
	settings(h *Host) []row
	// probe checks what doctor checks beyond the host (the metadata server); nil when nothing.
	probe(ctx context.Context, h *Host, opts Options) *Probe
	// perRank are the variables of the kind whose value belongs to one worker (PerRankEnv).
	perRank() []string
	// devNodeGlobs are the kind's device nodes as globs below the device root (DeviceNodeGlobs).
	devNodeGlobs() []string
}

// kinds are the registered kinds, from the highest preference down; byName indexes them by name and alias.
var (
	kinds  []Kind
	byName = map[string]Kind{}
)

// register adds a kind; each kind's file calls it once, from init.
func register(k Kind) {
	for _, name := range append([]string{string(k.Device())}, k.aliases()...) {
		if _, dup := byName[name]; dup {
			panic("topology: kind " + name + " registered twice")
		}
		byName[name] = k
	}
	kinds = append(kinds, k)
	slices.SortStableFunc(kinds, func(a, b Kind) int { return b.preference() - a.preference() })
}

// Kind returns the kind named d. A name no kind has (the "" of a hand-made Plan) gets the CPU kind, whose answers
// are those of a host without accelerators.
func (d Device) Kind() Kind {
	if k, ok := kindOf(d); ok {
		return k
	}
	return byName[string(CPU)]
}

// Devices lists the names of the kinds, sorted: what --device and --nproc-per-node take besides auto.
func Devices() []Device {
	out := make([]Device, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, k.Device())
	}
	slices.Sort(out)
	return out
}

// DeviceNamed returns the device that a --device spelling names: a kind's name or alias (cuda for gpu), in any
// case. auto and "" name none.
func DeviceNamed(s string) (Device, bool) {
	k, ok := byName[strings.ToLower(strings.TrimSpace(s))]
	if !ok {
		return "", false
	}
	return k.Device(), true
}

// deviceChoices are the --device values: auto, then the kinds' names.
func deviceChoices() []string {
	out := []string{"auto"}
	for _, d := range Devices() {
		out = append(out, string(d))
	}
	return out
}

// PerRankEnv lists the device variables whose value belongs to one worker: those of every kind's workers
// (PJRT_LOCAL_PROCESS_RANK, JAX's process variables) and each kind's own (TPU_VISIBLE_CHIPS, ...). The launcher
// never passes an inherited one through to its workers, whether or not the plan sets it.
func PerRankEnv() []string {
	out := []string{"PJRT_LOCAL_PROCESS_RANK", EnvJAXLocalDeviceIDs, EnvJAXProcessID, EnvJAXNumProcesses}
	for _, k := range kinds {
		out = append(out, k.perRank()...)
	}
	return out
}

// DeviceNodeGlobs lists every kind's device nodes as globs below the device root ("accel*", "vfio/*", "nvidia*"),
// from the most preferred kind down: what an interpreter that forks workers must not hold open (package preload).
func DeviceNodeGlobs() []string {
	var out []string
	for _, k := range kinds {
		out = append(out, k.devNodeGlobs()...)
	}
	return out
}

// pjrtKind returns the kind a PJRT_DEVICE value (upper case) selects.
func pjrtKind(v string) (Kind, bool) {
	for _, k := range kinds {
		if slices.Contains(k.pjrt(), v) {
			return k, true
		}
	}
	return nil, false
}

// pjrtChoices are the canonical PJRT_DEVICE values, in preference order.
func pjrtChoices() []string {
	out := make([]string, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, k.pjrt()[0])
	}
	return out
}

// autoDevice is the device of the most preferred kind that claims the host.
func autoDevice(d *detector, scan pciScan) Value[Device] {
	for _, k := range kinds {
		if v, ok := k.claim(d, scan); ok {
			return v
		}
	}
	return val(CPU, Default())
}

// kindOf returns the kind named d, if one is registered.
func kindOf(d Device) (Kind, bool) {
	k, ok := byName[string(d)]
	return k, ok && k.Device() == d
}

// CPU is the kind of a host without accelerators: the default when nothing else is found.
const CPU Device = "cpu"

func init() { register(cpu{}) }

// cpu is the CPU kind: one worker per process asked for (one by default), each a PJRT CPU client.
type cpu struct{ perHost }

func (cpu) Device() Device         { return CPU }
func (cpu) PerCore() bool          { return true }
func (cpu) NCCL() bool             { return false }
func (cpu) preference() int        { return 0 }
func (cpu) pjrt() []string         { return []string{"CPU"} }
func (cpu) aliases() []string      { return nil }
func (cpu) devices(*Host) []Chip   { return nil }
func (cpu) perRank() []string      { return nil }
func (cpu) devNodeGlobs() []string { return nil }

// claim: every host has CPUs, so auto detection ends here.
func (cpu) claim(*detector, pciScan) (Value[Device], bool) { return val(CPU, Default()), true }

func (cpu) detect(_ context.Context, d *detector) error {
	d.h.ReplicasPerChip = 1
	return nil
}

func (cpu) plan(h *Host, req Request) (*Plan, error) {
	n := req.NProcs
	if n == 0 {
		n = 1
	}
	p, err := CPUPlan(n)
	if err != nil {
		return nil, err
	}
	for i := range p.Workers {
		p.Workers[i].Env["CPU_NUM_DEVICES"] = "1"
	}
	return p, nil
}

func (cpu) explain(*Host, Request) []string { return []string{jaxNeedsIDs("")} }

func (cpu) settings(h *Host) []row { return []row{spmdSetting(h)} }

// CPUPlan is the single-host plan of n CPU workers: the embedded default that needs no accelerator.
func CPUPlan(n int) (*Plan, error) {
	if n < 1 {
		return nil, fmt.Errorf("nprocs %d: need at least 1 worker", n)
	}
	p := &Plan{Device: CPU, Nodes: []Node{{Rank: 0, Host: "localhost", LocalWorkers: n}}}
	for i := 0; i < n; i++ {
		p.Workers = append(p.Workers, Worker{
			Rank: i, LocalRank: i, NodeRank: 0, Replicas: []int{i},
			Env: map[string]string{
				"PJRT_DEVICE":              "CPU",
				"PJRT_LOCAL_PROCESS_RANK":  strconv.Itoa(i),
				"PJRT_LOCAL_PROCESS_COUNT": strconv.Itoa(n),
			},
		})
	}
	return p, nil
}

// Options says what to detect and where to look. The zero value detects the real host with os env.
type Options struct {
	// Device is "", "auto", "cpu", "gpu" or "tpu". "" and "auto" pick TPU > GPU > CPU.
	Device string

	// Overrides of the environment (the CLI's --accelerator-type and --spmd); the zero value means "not given".
	AcceleratorType string
	SPMD            bool

	// LookupEnv reads the environment; nil means os.LookupEnv. Tests pass a map lookup.
	LookupEnv func(string) (string, bool)

	// The OS behind root directories; "" means "/sys", "/dev", "/proc" (or TPURUN_SYSFS_ROOT, TPURUN_DEV_ROOT,
	// TPURUN_PROC_ROOT from the environment).
	SysfsRoot, DevRoot, ProcRoot string

	// MetadataURL is the metadata server base URL; "" means GCE_METADATA_HOST, else http://metadata.google.internal.
	MetadataURL string
	// MetadataBudget bounds all metadata queries of one Detect together (--metadata-timeout); 0 means 3s.
	MetadataBudget time.Duration
	// HTTPClient is used for metadata queries; nil means a fresh client that never uses a proxy.
	HTTPClient *http.Client
	// Logger receives debug logs; nil means zap.NewNop().
	Logger *zap.Logger
}

// Host is everything detected about this host, each value with its source: the device, what every kind's host
// has (the SPMD switch, its place among the job's nodes, the OS roots), and the state the device's kind detected,
// which only the kind's own file reads (tpu.go's tpuHost: the chips and the slice; gpu.go's gpuHost: the GPUs).
// Accessors give callers outside the package what they need of a kind's state (AcceleratorType, Megascale).
type Host struct {
	Device Value[Device] `json:"device"`
	// ReplicasPerChip counts the devices each chip shows (2 TensorCores on v2/v3 TPUs); 1 on every other host.
	ReplicasPerChip int `json:"replicas_per_chip"`
	// NodeHosts and NodeRank place this host among the job's nodes for a rendezvous, from the first source that
	// is set: the slice's host list (TPU_WORKER_HOSTNAMES or the metadata server, with TPU_WORKER_ID), a batch
	// scheduler's (SLURM_JOB_NODELIST with SLURM_NODEID), or JOB_COMPLETION_INDEX for the rank alone. NodeErr is
	// why they could not be read on a host that is not a TPU (a TPU host fails detection instead); it is reported
	// only by a run that needs them, so a single-host run inside a SLURM job is not stopped by its variables.
	NodeHosts Value[[]string] `json:"node_hosts"`
	NodeRank  Value[int]      `json:"node_rank"`
	NodeErr   error           `json:"-"`
	SPMD      Value[bool]     `json:"spmd"`

	// MetadataErr is the metadata failure that detection fell back from (single host), for doctor.
	MetadataErr error `json:"-"`
	// Roots are the OS roots used, for the port and holder checks that follow.
	SysfsRoot string `json:"-"`
	DevRoot   string `json:"-"`
	ProcRoot  string `json:"-"`

	// state is what the device's kind detected (a pointer its file defines); nil when the kind keeps none (cpu).
	// MarshalJSON writes its fields beside the host's own.
	state any
}

// MarshalJSON writes the host's own fields and, beside them, those of its kind's detected state.
func (h Host) MarshalJSON() ([]byte, error) {
	type own Host // without the method
	out, err := json.Marshal(own(h))
	if err != nil || h.state == nil {
		return out, err
	}
	st, err := json.Marshal(h.state)
	if err != nil {
		return nil, err
	}
	if len(st) <= 2 { // {}
		return out, nil
	}
	return append(append(out[:len(out)-1:len(out)-1], ','), st[1:]...), nil
}

// detector carries one Detect call.
type detector struct {
	opts Options
	env  func(string) (string, bool)
	log  *zap.Logger
	md   *MetadataClient
	h    *Host
}

// Detect finds the devices and topology of this host: flags > env > sysfs/dev > GCE metadata > defaults. The
// metadata server is asked only for a TPU host whose slice env does not describe (TPU_SKIP_MDS_QUERY, or the
// accelerator type with the host list of a multi-host slice); each key at most once, within opts.MetadataBudget.
// A single host whose metadata fails is planned from what sysfs proves. Malformed env values are *ConfigError.
func Detect(ctx context.Context, opts Options) (*Host, error) {
	d := &detector{opts: opts, env: opts.LookupEnv, log: opts.Logger}
	if d.env == nil {
		d.env = os.LookupEnv
	}
	if d.log == nil {
		d.log = zap.NewNop()
	}
	h := &Host{
		SysfsRoot: d.root(opts.SysfsRoot, "TPURUN_SYSFS_ROOT", "/sys"),
		DevRoot:   d.root(opts.DevRoot, "TPURUN_DEV_ROOT", "/dev"),
		ProcRoot:  d.root(opts.ProcRoot, "TPURUN_PROC_ROOT", "/proc"),
	}
	d.h = h
	if err := d.device(); err != nil {
		return nil, err
	}
	kind := h.Device.V.Kind()
	if err := kind.detect(ctx, d); err != nil {
		return nil, err
	}
	if err := d.spmd(); err != nil {
		return nil, err
	}
	kind.nodes(d)
	d.log.Debug("detected host", zap.String("device", string(h.Device.V)), zap.String("source", h.Device.Source.String()),
		zap.Int("devices", len(kind.devices(h))), zap.String("accelerator", h.AcceleratorType()))
	return h, nil
}

func (d *detector) root(given, envName, def string) string {
	if given != "" {
		return given
	}
	if v, ok := d.env(envName); ok && v != "" {
		return v
	}
	return def
}

// lookup returns a non-empty env value.
func (d *detector) lookup(name string) (string, bool) {
	v, ok := d.env(name)
	if !ok || strings.TrimSpace(v) == "" {
		return "", false
	}
	return v, true
}

func envErr(name, value string, err error, hint string) error {
	return &ConfigError{Name: setting.Named(name), Value: strconv.Quote(value), Problem: "is malformed", Sources: []Source{Env(name)}, Err: err, Hint: hint}
}

// device picks the device: --device, else PJRT_DEVICE, else the most preferred kind present on the host.
func (d *detector) device() error {
	if name := strings.ToLower(strings.TrimSpace(d.opts.Device)); name != "" && name != "auto" {
		dev, ok := DeviceNamed(name)
		if !ok {
			return &ConfigError{Name: setting.Device, Value: strconv.Quote(d.opts.Device), Problem: "is not a device",
				Sources: []Source{Flag("device")}, Choices: deviceChoices()}
		}
		d.h.Device = val(dev, Flag("device"))
		return nil
	}
	if v, ok := d.lookup("PJRT_DEVICE"); ok {
		k, ok := pjrtKind(strings.ToUpper(strings.TrimSpace(v)))
		if !ok {
			return &ConfigError{Name: "PJRT_DEVICE", Value: strconv.Quote(v), Problem: "is not a PJRT device",
				Sources: []Source{Env("PJRT_DEVICE")}, Choices: pjrtChoices(), Hint: "or unset it"}
		}
		d.h.Device = val(k.Device(), Env("PJRT_DEVICE"))
		return nil
	}
	scan, err := scanPCI(d.h.SysfsRoot)
	if err != nil {
		return err
	}
	d.h.Device = autoDevice(d, scan)
	return nil
}

// spmd reads --spmd and XLA_USE_SPMD.
func (d *detector) spmd() error {
	if d.opts.SPMD {
		d.h.SPMD = val(true, Flag("spmd"))
		return nil
	}
	if v, ok := d.lookup("XLA_USE_SPMD"); ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return envErr("XLA_USE_SPMD", v, err, "use 1 or 0")
		}
		d.h.SPMD = val(b, Env("XLA_USE_SPMD"))
		return nil
	}
	d.h.SPMD = val(false, Default())
	return nil
}

// SourceKind says where a detected value came from, in precedence order: flags beat env, env beats sysfs/dev,
// sysfs/dev beat the metadata server, which beats the defaults.
type SourceKind string

// The kinds of source a Value can have.
const (
	FromFlag     SourceKind = "flag"
	FromEnv      SourceKind = "env"
	FromSysfs    SourceKind = "sysfs"
	FromDev      SourceKind = "dev"
	FromMetadata SourceKind = "metadata"
	FromDefault  SourceKind = "default"
	FromDerived  SourceKind = "derived"
)

// Source names where a value came from: the flag, the env var, the sysfs file or directory, the metadata URL, or
// "default". The zero Source means "not set".
type Source struct {
	Kind SourceKind `json:"kind"`
	Name string     `json:"name,omitempty"`
}

// String renders "env TPU_NUM_DEVICES", "flag --nprocs", "sysfs /sys/bus/pci/devices", "default".
func (s Source) String() string {
	switch {
	case s.Kind == "":
		return "unset"
	case s.Name == "":
		return string(s.Kind)
	case s.Kind == FromDerived:
		return "derived from " + s.Name
	default:
		return fmt.Sprintf("%s %s", s.Kind, s.Name)
	}
}

// IsSet reports whether the source is known, i.e. the value was given or detected.
func (s Source) IsSet() bool { return s.Kind != "" }

// Flag, Env, Sysfs, Dev, Metadata and Default build Sources.
func Flag(name string) Source    { return Source{Kind: FromFlag, Name: "--" + name} }
func Env(name string) Source     { return Source{Kind: FromEnv, Name: name} }
func Sysfs(path string) Source   { return Source{Kind: FromSysfs, Name: path} }
func Dev(path string) Source     { return Source{Kind: FromDev, Name: path} }
func Metadata(url string) Source { return Source{Kind: FromMetadata, Name: url} }
func Default() Source            { return Source{Kind: FromDefault} }
func Derived(from string) Source { return Source{Kind: FromDerived, Name: from} }

// DerivedFrom is the source of a value computed from another: it names the original source once, however long
// the chain of derivations ("derived from sysfs /sys/bus/pci/devices", never "derived derived ...").
func DerivedFrom(s Source) Source {
	if s.Kind == FromDerived {
		return s
	}
	return Derived(s.String())
}

// Value is one detected setting together with where it came from.
type Value[T any] struct {
	V      T      `json:"value"`
	Source Source `json:"source"`
}

// IsSet reports whether the value was given or detected (its Source is known).
func (v Value[T]) IsSet() bool { return v.Source.IsSet() }

func val[T any](v T, s Source) Value[T] { return Value[T]{V: v, Source: s} }

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

// pciScan is what the sysfs PCI scan found: every PCI function of the host, in PCI address order. Each kind picks
// its own devices out of it (chips).
type pciScan struct {
	dir   string
	funcs []pciFunction
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
	for _, name := range names {
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

// numberedNodes lists the device nodes in dir named prefix followed by a number (/dev/accelN: dev and "accel";
// /dev/vfio/N: dev/vfio and "", never /dev/vfio/vfio), sorted by number. Each kind names its own.
func numberedNodes(dir, prefix string) []string {
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

// envNodes fills NodeHosts and NodeRank (see Host) on a host that is not a TPU, from the same variables a TPU slice
// is described by (TPU_WORKER_HOSTNAMES, TPU_WORKER_ID, JOB_COMPLETION_INDEX), else SLURM's. A malformed one is kept
// in NodeErr for the run that needs it. (A TPU host has read them already, and malformed values failed detection.)
func (d *detector) envNodes() {
	h := d.h
	if v, ok := d.lookup("TPU_WORKER_HOSTNAMES"); ok {
		hosts, err := ParseHostList(v)
		if err != nil {
			h.NodeErr = envErr("TPU_WORKER_HOSTNAMES", v, err, "list every host, comma-separated, in node order")
			return
		}
		h.NodeHosts = val(hosts, Env("TPU_WORKER_HOSTNAMES"))
		h.NodeRank, h.NodeErr = d.index("TPU_WORKER_ID", "JOB_COMPLETION_INDEX")
		return
	}
	if d.slurmNodes() {
		return
	}
	h.NodeRank, h.NodeErr = d.index("TPU_WORKER_ID", "JOB_COMPLETION_INDEX")
}

// slurmNodes fills NodeHosts and NodeRank from SLURM_JOB_NODELIST and SLURM_NODEID, reporting whether the list is
// set.
func (d *detector) slurmNodes() bool {
	h := d.h
	v, ok := d.lookup("SLURM_JOB_NODELIST")
	if !ok {
		return false
	}
	hosts, err := ParseSlurmNodelist(v)
	if err != nil {
		h.NodeErr = envErr("SLURM_JOB_NODELIST", v, err, "fix the node list, or name the hosts another way")
		return true
	}
	h.NodeHosts = val(hosts, Env("SLURM_JOB_NODELIST"))
	h.NodeRank, h.NodeErr = d.index("SLURM_NODEID")
	return true
}

// index reads the first of names that is set as a node index.
func (d *detector) index(names ...string) (Value[int], error) {
	for _, name := range names {
		if v, ok := d.lookup(name); ok {
			n, err := ParseIndex(v)
			if err != nil {
				return Value[int]{}, envErr(name, v, err, "use this node's index, from 0")
			}
			return val(n, Env(name)), nil
		}
	}
	return Value[int]{}, nil
}

// Holder is a process that has a device node (or other file) open.
type Holder struct {
	PID     int    `json:"pid"`
	Command string `json:"command"`
	Path    string `json:"path"`
}

// Holders lists the processes that have any of paths open, by scanning <procRoot>/*/fd links (what libtpu and
// tpu-info do). Processes that vanish or whose fds cannot be read (another user's, without privilege) are skipped.
// The result is in pid order, one entry per (pid, path).
func Holders(procRoot string, paths []string) ([]Holder, error) {
	want := map[string]string{}
	for _, p := range paths {
		want[filepath.Clean(p)] = p
		if r, err := filepath.EvalSymlinks(p); err == nil {
			want[r] = p
		}
	}
	var out []Holder
	err := eachFD(procRoot, func(pid int, target string) bool {
		if p, ok := want[target]; ok {
			for _, h := range out {
				if h.PID == pid && h.Path == p {
					return true
				}
			}
			out = append(out, Holder{PID: pid, Command: command(procRoot, pid), Path: p})
		}
		return true
	})
	return out, err
}

// eachFD calls fn with each open fd's link target of every process under procRoot, in pid order, until fn says stop.
func eachFD(procRoot string, fn func(pid int, target string) bool) error {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return fmt.Errorf("list processes in %s: %w", procRoot, err)
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	// os.ReadDir sorts by name, so sort numerically.
	sortInts(pids)
	for _, pid := range pids {
		fdDir := filepath.Join(procRoot, strconv.Itoa(pid), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil {
				continue
			}
			if !fn(pid, target) {
				return nil
			}
		}
	}
	return nil
}

func sortInts(xs []int) {
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j] < xs[j-1]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
}

// command returns a process's command line (or its comm name when the command line is empty).
func command(procRoot string, pid int) string {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cmdline"))
	if err == nil && len(b) > 0 {
		return strings.TrimSpace(strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " "))
	}
	return readTrim(filepath.Join(procRoot, strconv.Itoa(pid), "comm"))
}

// LockState is the state of the libtpu lockfile.
type LockState struct {
	Path    string `json:"path"`
	Exists  bool   `json:"exists"`
	Held    bool   `json:"held"`
	PID     int    `json:"pid,omitempty"`
	Command string `json:"command,omitempty"`
	Stale   bool   `json:"stale"` // exists but nobody holds a lock on it: harmless, libtpu takes it again
}

// Lockfile reports whether path (normally /tmp/libtpu_lockfile) exists and who holds a lock on it: first from
// <procRoot>/locks (matching the file's device and inode), then by asking the kernel (F_GETLK).
func Lockfile(procRoot, path string) (LockState, error) {
	st := LockState{Path: path}
	var sys syscall.Stat_t
	if err := syscall.Stat(path, &sys); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return st, nil
		}
		return st, fmt.Errorf("stat lockfile %s: %w", path, err)
	}
	st.Exists = true
	if pid, err := lockHolder(filepath.Join(procRoot, "locks"), sys); err == nil && pid > 0 {
		st.Held, st.PID = true, pid
	} else if pid := getlk(path); pid > 0 {
		st.Held, st.PID = true, pid
	}
	if st.Held {
		st.Command = command(procRoot, st.PID)
	} else {
		st.Stale = true
	}
	return st, nil
}

// lockHolder finds the pid of a lock on the file with the given stat in a /proc/locks table. Lines look like
// "1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (blocked waiters have "->" and are skipped).
func lockHolder(locksPath string, st syscall.Stat_t) (int, error) {
	f, err := os.Open(locksPath)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	major, minor := (st.Dev>>8)&0xfff|((st.Dev>>32)&^0xfff), (st.Dev&0xff)|((st.Dev>>12)&^0xff)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] == "->" {
			continue
		}
		id := strings.Split(fields[5], ":")
		if len(id) != 3 {
			continue
		}
		ma, err1 := strconv.ParseUint(id[0], 16, 64)
		mi, err2 := strconv.ParseUint(id[1], 16, 64)
		ino, err3 := strconv.ParseUint(id[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		if ma == uint64(major) && mi == uint64(minor) && ino == st.Ino {
			pid, err := strconv.Atoi(fields[4])
			if err == nil {
				return pid, nil
			}
		}
	}
	return 0, sc.Err()
}

// getlk asks the kernel whether a write lock on the whole file would conflict and with whose (another process's).
func getlk(path string) int {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		if f, err = os.Open(path); err != nil {
			return 0
		}
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil {
		return 0
	}
	if lk.Type == syscall.F_UNLCK {
		return 0
	}
	return int(lk.Pid)
}

// DevNodes lists the device nodes of the host's chips (or GPUs), for Holders.
func (h *Host) DevNodes() []string {
	var out []string
	for _, c := range h.Device.V.Kind().devices(h) {
		if c.DevNode != "" {
			out = append(out, c.DevNode)
		}
	}
	return out
}

// CheckFree is the pre-launch check: an error *BusyError (errors.Is ErrChipBusy) when another process holds one of
// the usable chips' device nodes open.
func (h *Host) CheckFree() error {
	paths := h.Device.V.Kind().usableNodes(h)
	if len(paths) == 0 {
		return nil
	}
	holders, err := Holders(h.ProcRoot, paths)
	if err != nil {
		return err
	}
	self := os.Getpid()
	var others []Holder
	for _, x := range holders {
		if x.PID != self {
			others = append(others, x)
		}
	}
	if len(others) > 0 {
		return &BusyError{Holders: others}
	}
	return nil
}
