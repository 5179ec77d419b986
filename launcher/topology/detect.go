package topology

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Options says what to detect and where to look. The zero value detects the real host with os env.
type Options struct {
	// Device is "", "auto", "cpu", "gpu" or "tpu" (--device). "" and "auto" pick TPU > GPU > CPU.
	Device string

	// Overrides from flags; the zero value means "not given".
	AcceleratorType string   // --accelerator-type
	WorkerID        *int     // --worker-id
	WorkerHostnames []string // --worker-hostnames
	SPMD            bool     // --spmd

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

// Host is everything detected about this host, each value with its source.
type Host struct {
	Device Value[Device] `json:"device"`

	// TPU: the chips present (PCI address order), the family, the slice description.
	Chips           []Chip             `json:"chips,omitempty"`
	ChipsSource     Source             `json:"chips_source"`
	Family          string             `json:"family,omitempty"` // "v4", "v5litepod", "v2/v3", ...
	ReplicasPerChip int                `json:"replicas_per_chip"`
	Accelerator     Value[Accelerator] `json:"accelerator"`
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
	SPMD               Value[bool]     `json:"spmd"`
	// Megascale holds MEGASCALE_* values given by env or tpu-env, copied to every worker.
	Megascale map[string]Value[string] `json:"megascale,omitempty"`

	// GPU: the GPUs present and the ones this launcher may use (CUDA_VISIBLE_DEVICES of the parent).
	GPUs       []Chip       `json:"gpus,omitempty"`
	GPUSource  Source       `json:"gpu_source"`
	UsableGPUs Value[[]int] `json:"usable_gpus"`

	// MetadataErr is the metadata failure that detection fell back from (single host), for doctor.
	MetadataErr error `json:"-"`
	// Roots are the OS roots used, for the port and holder checks that follow.
	SysfsRoot string `json:"-"`
	DevRoot   string `json:"-"`
	ProcRoot  string `json:"-"`
}

// MultiHost reports whether the slice has more than one host.
func (h *Host) MultiHost() bool { return len(h.Hostnames.V) > 1 }

// detector carries one Detect call.
type detector struct {
	opts Options
	env  func(string) (string, bool)
	log  *zap.Logger
	md   *MetadataClient
	h    *Host
}

// Detect finds the devices and topology of this host: flags > env > sysfs/dev > GCE metadata > defaults. The
// metadata server is asked only for a TPU host whose slice env does not describe and that sysfs does not prove to
// be a single host; each key at most once, within opts.MetadataBudget. Malformed env values are *ConfigError.
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
	var err error
	switch h.Device.V {
	case TPU:
		err = d.tpu(ctx)
	case GPU:
		err = d.gpu()
	case CPU:
		h.ReplicasPerChip = 1
	}
	if err != nil {
		return nil, err
	}
	if err := d.spmd(); err != nil {
		return nil, err
	}
	d.log.Debug("detected host", zap.String("device", string(h.Device.V)), zap.String("source", h.Device.Source.String()),
		zap.Int("chips", len(h.Chips)), zap.String("accelerator", h.Accelerator.V.Type))
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
	return &ConfigError{Name: name, Value: strconv.Quote(value), Problem: "is malformed", Sources: []Source{Env(name)}, Err: err, Hint: hint}
}

// device picks the device: --device, else PJRT_DEVICE, else TPU > GPU > CPU by what is present.
func (d *detector) device() error {
	h := d.h
	switch strings.ToLower(strings.TrimSpace(d.opts.Device)) {
	case "cpu":
		h.Device = val(CPU, Flag("device"))
		return nil
	case "gpu", "cuda":
		h.Device = val(GPU, Flag("device"))
		return nil
	case "tpu":
		h.Device = val(TPU, Flag("device"))
		return nil
	case "", "auto":
	default:
		return &ConfigError{Name: "--device", Value: strconv.Quote(d.opts.Device), Problem: "is not a device",
			Sources: []Source{Flag("device")}, Choices: []string{"auto", "cpu", "gpu", "tpu"}}
	}
	if v, ok := d.lookup("PJRT_DEVICE"); ok {
		switch strings.ToUpper(strings.TrimSpace(v)) {
		case "TPU":
			h.Device = val(TPU, Env("PJRT_DEVICE"))
		case "CUDA", "GPU":
			h.Device = val(GPU, Env("PJRT_DEVICE"))
		case "CPU":
			h.Device = val(CPU, Env("PJRT_DEVICE"))
		default:
			return &ConfigError{Name: "PJRT_DEVICE", Value: strconv.Quote(v), Problem: "is not a PJRT device",
				Sources: []Source{Env("PJRT_DEVICE")}, Choices: []string{"TPU", "CUDA", "CPU"}, Hint: "or unset it"}
		}
		return nil
	}
	scan, err := scanPCI(h.SysfsRoot)
	if err != nil {
		return err
	}
	switch {
	case scan.google > 0:
		h.Device = val(TPU, Sysfs(scan.dir))
	case len(devNodes(h.DevRoot, "accel")) > 0:
		h.Device = val(TPU, Dev(h.DevRoot+"/accel*"))
	case len(scan.gpus) > 0:
		h.Device = val(GPU, Sysfs(scan.dir))
	case len(devNodes(h.DevRoot, "nvidia")) > 0:
		h.Device = val(GPU, Dev(h.DevRoot+"/nvidia*"))
	default:
		h.Device = val(CPU, Default())
	}
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

func (d *detector) gpu() error {
	h := d.h
	h.ReplicasPerChip = 1
	scan, err := scanPCI(h.SysfsRoot)
	if err != nil {
		return err
	}
	if len(scan.gpus) > 0 {
		h.GPUs, h.GPUSource = scan.gpus, Sysfs(scan.dir)
		for i, n := range devNodes(h.DevRoot, "nvidia") {
			if i < len(h.GPUs) {
				h.GPUs[i].DevNode = n
			}
		}
	} else if nodes := devNodes(h.DevRoot, "nvidia"); len(nodes) > 0 {
		for i, n := range nodes {
			h.GPUs = append(h.GPUs, Chip{Index: i, DevNode: n})
		}
		h.GPUSource = Dev(h.DevRoot + "/nvidia*")
	}
	all := make([]int, len(h.GPUs))
	for i := range all {
		all[i] = i
	}
	h.UsableGPUs = val(all, h.GPUSource)
	if v, ok := d.lookup("CUDA_VISIBLE_DEVICES"); ok {
		list, err := ParseChipList(v)
		if err != nil {
			return envErr("CUDA_VISIBLE_DEVICES", v, err, "use GPU indices such as 0,1")
		}
		h.UsableGPUs = val(list, Env("CUDA_VISIBLE_DEVICES"))
	}
	if len(h.UsableGPUs.V) == 0 {
		src := h.Device.Source
		return &ConfigError{Name: "device", Value: "gpu", Problem: "was asked for but no NVIDIA GPU was found under " +
			h.SysfsRoot + "/bus/pci/devices or " + h.DevRoot + "/nvidia*", Sources: []Source{src},
			Hint: "use --device cpu or --device auto"}
	}
	return nil
}

// tpu detects the chips and the slice of a TPU host.
func (d *detector) tpu(ctx context.Context) error {
	h := d.h
	if err := d.sliceFromFlagsAndEnv(); err != nil {
		return err
	}
	scan, err := scanPCI(h.SysfsRoot)
	if err != nil {
		return err
	}
	if len(scan.unknown) > 0 && !h.Accelerator.IsSet() {
		return &UnknownDeviceError{Count: scan.google, IDs: scan.unknown, Location: scan.dir}
	}
	if len(scan.tpus) > 0 {
		h.Chips, h.ChipsSource, h.Family = scan.tpus, Sysfs(scan.dir), scan.family
		if scan.family != "" {
			h.ReplicasPerChip = pciDevices[scan.tpus[0].DeviceID].ReplicasPerChip
		}
	}
	if h.Accelerator.IsSet() {
		if h.Family != "" && h.Family != "v2/v3" && h.Family != "test" && h.Family != h.Accelerator.V.Family.Name {
			return &ConfigError{Name: "accelerator type", Value: h.Accelerator.V.Type,
				Problem: fmt.Sprintf("contradicts the %d %s chips on this host", len(h.Chips), h.Family),
				Sources: []Source{h.Accelerator.Source, h.ChipsSource}, Hint: "fix or unset " + h.Accelerator.Source.Name}
		}
		h.Family = h.Accelerator.V.Family.Name
		h.ReplicasPerChip = h.Accelerator.V.Family.ReplicasPerChip
	}
	d.attachDevNodes()

	// The metadata server: only when env does not describe the slice and sysfs does not prove a single host.
	if err := d.metadata(ctx); err != nil {
		return err
	}
	if len(h.Chips) == 0 {
		if h.Accelerator.IsSet() {
			n := h.Accelerator.V.ChipsPerHost()
			for i := 0; i < n; i++ {
				h.Chips = append(h.Chips, Chip{Index: i})
			}
			h.ChipsSource = DerivedFrom(h.Accelerator.Source)
			d.attachDevNodes()
		} else {
			return &ConfigError{Name: "device", Value: "tpu", Problem: "was asked for but no TPU chip was found under " +
				h.SysfsRoot + "/bus/pci/devices, " + h.DevRoot + "/accel* or " + h.DevRoot + "/vfio/N",
				Sources: []Source{h.Device.Source}, Hint: "set TPU_ACCELERATOR_TYPE if the chips are hidden from this container, or use --device cpu"}
		}
	}
	if h.ReplicasPerChip == 0 {
		h.ReplicasPerChip = 1
	}
	if !h.Accelerator.IsSet() && h.Family != "" {
		if a, ok := deriveAccelerator(h.Family, len(h.Chips)); ok && len(h.Hostnames.V) <= 1 {
			h.Accelerator = val(a, DerivedFrom(h.ChipsSource))
		}
	}
	return d.finishSlice()
}

// sliceFromFlagsAndEnv reads the slice description: flags first, then env.
func (d *detector) sliceFromFlagsAndEnv() error {
	h := d.h
	if d.opts.AcceleratorType != "" {
		a, err := ParseAcceleratorType(d.opts.AcceleratorType)
		if err != nil {
			return &ConfigError{Name: "--accelerator-type", Value: strconv.Quote(d.opts.AcceleratorType), Problem: "is malformed",
				Sources: []Source{Flag("accelerator-type")}, Err: err}
		}
		h.Accelerator = val(a, Flag("accelerator-type"))
	} else if v, ok := d.lookup("TPU_ACCELERATOR_TYPE"); ok {
		a, err := ParseAcceleratorType(v)
		if err != nil {
			return envErr("TPU_ACCELERATOR_TYPE", v, err, "use a type such as v4-8, v5litepod-8 or v6e-16, or unset it")
		}
		h.Accelerator = val(a, Env("TPU_ACCELERATOR_TYPE"))
	}
	for _, b := range []struct {
		name string
		dst  *Value[Bounds]
	}{{"TPU_HOST_BOUNDS", &h.HostBounds}, {"TPU_CHIPS_PER_HOST_BOUNDS", &h.ChipsPerHostBounds}, {"TPU_PROCESS_BOUNDS", &h.ProcessBounds}} {
		if v, ok := d.lookup(b.name); ok {
			bb, err := ParseBounds(v)
			if err != nil {
				return envErr(b.name, v, err, "use three positive numbers such as 2,2,1, or unset it")
			}
			*b.dst = val(bb, Env(b.name))
		}
	}
	if len(d.opts.WorkerHostnames) > 0 {
		hosts, err := ParseHostList(strings.Join(d.opts.WorkerHostnames, ","))
		if err != nil {
			return &ConfigError{Name: "--worker-hostnames", Value: strconv.Quote(strings.Join(d.opts.WorkerHostnames, ",")),
				Problem: "is malformed", Sources: []Source{Flag("worker-hostnames")}, Err: err}
		}
		h.Hostnames = val(hosts, Flag("worker-hostnames"))
	} else if v, ok := d.lookup("TPU_WORKER_HOSTNAMES"); ok {
		hosts, err := ParseHostList(v)
		if err != nil {
			return envErr("TPU_WORKER_HOSTNAMES", v, err, "list every host of the slice, comma-separated, in worker order")
		}
		h.Hostnames = val(hosts, Env("TPU_WORKER_HOSTNAMES"))
	}
	if d.opts.WorkerID != nil {
		if *d.opts.WorkerID < 0 {
			return &ConfigError{Name: "--worker-id", Value: strconv.Itoa(*d.opts.WorkerID), Problem: "is negative", Sources: []Source{Flag("worker-id")}}
		}
		h.WorkerID = val(*d.opts.WorkerID, Flag("worker-id"))
	} else {
		for _, name := range []string{"TPU_WORKER_ID", "JOB_COMPLETION_INDEX"} { // GKE/JobSet index as a fallback
			if v, ok := d.lookup(name); ok {
				n, err := ParseIndex(v)
				if err != nil {
					return envErr(name, v, err, "use this host's index in the slice, from 0")
				}
				h.WorkerID = val(n, Env(name))
				break
			}
		}
	}
	if v, ok := d.lookup("TPU_NUM_DEVICES"); ok {
		n, err := ParseCount(v)
		if err != nil {
			return envErr("TPU_NUM_DEVICES", v, err, "set it to the number of local chips to use (1, 2, 4 or all), or unset it")
		}
		h.NumDevices = val(n, Env("TPU_NUM_DEVICES"))
	}
	if v, ok := d.lookup("TPU_VISIBLE_CHIPS"); ok {
		list, err := ParseChipList(v)
		if err != nil {
			return envErr("TPU_VISIBLE_CHIPS", v, err, "use chip indices such as 0,1,2,3, or unset it")
		}
		h.VisibleChips = val(list, Env("TPU_VISIBLE_CHIPS"))
	}
	for _, name := range []string{"MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID", "MEGASCALE_PORT"} {
		if v, ok := d.lookup(name); ok {
			if name != "MEGASCALE_COORDINATOR_ADDRESS" {
				parse := ParseIndex
				if name == "MEGASCALE_NUM_SLICES" || name == "MEGASCALE_PORT" {
					parse = ParseCount
				}
				if _, err := parse(v); err != nil {
					return envErr(name, v, err, "use a whole number, or unset it")
				}
			}
			if h.Megascale == nil {
				h.Megascale = map[string]Value[string]{}
			}
			h.Megascale[name] = val(strings.TrimSpace(v), Env(name))
		}
	}
	return nil
}

// attachDevNodes gives each chip its device node: /dev/accelN (v2-v4) or /dev/vfio/N (v5e and later).
func (d *detector) attachDevNodes() {
	h := d.h
	style := "vfio"
	if f, ok := families[h.Family]; ok {
		style = f.DevNodes
	} else if h.Family == "v2/v3" {
		style = "accel"
	} else if len(h.Chips) > 0 {
		if p, ok := pciDevices[h.Chips[0].DeviceID]; ok {
			style = p.DevNodes
		}
	}
	nodes := devNodes(h.DevRoot, style)
	if len(nodes) == 0 && len(h.Chips) == 0 {
		// No sysfs: chips proven by device nodes alone.
		for _, st := range []string{"accel", "vfio"} {
			if nodes = devNodes(h.DevRoot, st); len(nodes) > 0 {
				for i := range nodes {
					h.Chips = append(h.Chips, Chip{Index: i})
				}
				if st == "accel" {
					h.ChipsSource = Dev(h.DevRoot + "/accel*")
				} else {
					h.ChipsSource = Dev(h.DevRoot + "/vfio")
				}
				break
			}
		}
	}
	for i := range h.Chips {
		if i < len(nodes) {
			h.Chips[i].DevNode = nodes[i]
		}
	}
}

// provenSingleHost reports whether sysfs proves this host is a whole slice by itself: a v5e/v6e host with a chip
// count that multi-host slices never have (multi-host v5e/v6e hosts have 4 chips).
func (h *Host) provenSingleHost() bool {
	if h.ChipsSource.Kind != FromSysfs {
		return false
	}
	f, ok := families[h.Family]
	if !ok {
		return false
	}
	return len(h.Chips) <= f.MaxSingleHost && len(h.Chips) != f.ChipsPerHost
}

// metadata fills what env left open from the metadata server, when that is needed at all.
func (d *detector) metadata(ctx context.Context) error {
	h := d.h
	envAnswers := h.Accelerator.IsSet() && (h.Hostnames.IsSet() || h.Accelerator.V.Hosts() == 1)
	_, skip := d.lookup("TPU_SKIP_MDS_QUERY")
	if envAnswers || h.provenSingleHost() || (skip && len(h.Chips) > 0) {
		return nil
	}
	if skip {
		return &ConfigError{Name: "TPU_SKIP_MDS_QUERY", Value: "set", Problem: "forbids the metadata query but neither env nor sysfs describes the TPU slice",
			Sources: []Source{Env("TPU_SKIP_MDS_QUERY")}, Hint: "set TPU_ACCELERATOR_TYPE (and TPU_WORKER_ID, TPU_WORKER_HOSTNAMES for several hosts)"}
	}
	base := d.opts.MetadataURL
	if base == "" {
		if v, ok := d.lookup("GCE_METADATA_HOST"); ok {
			base = v
		}
	}
	d.md = NewMetadataClient(base, d.opts.HTTPClient, d.opts.MetadataBudget, d.log)
	err := d.fromMetadata(ctx)
	if err == nil {
		return nil
	}
	if len(h.Chips) > 0 && !h.Hostnames.IsSet() && errors.Is(err, ErrMetadata) {
		// Single host fallback: what sysfs proves is enough to run on this host.
		d.log.Warn("metadata server unusable; planning for this host alone from what sysfs proves", zap.Error(err))
		h.MetadataErr = err
		return nil
	}
	return err
}

func (d *detector) fromMetadata(ctx context.Context) error {
	h, md := d.h, d.md
	body, err := md.Get(ctx, KeyTPUEnv)
	if err != nil {
		return err
	}
	kv, err := ParseTPUEnv(body)
	if err != nil {
		return md.parsed(KeyTPUEnv, err)
	}
	src := Metadata(md.URL(KeyTPUEnv))
	if !h.Accelerator.IsSet() {
		t, ok := kv["ACCELERATOR_TYPE"]
		asrc := src
		if !ok {
			if t, err = md.Get(ctx, KeyAcceleratorType); err != nil {
				return err
			}
			asrc = Metadata(md.URL(KeyAcceleratorType))
		}
		a, err := ParseAcceleratorType(t)
		if err != nil {
			return md.parsed(KeyTPUEnv, err)
		}
		h.Accelerator = val(a, asrc)
	}
	for _, b := range []struct {
		key string
		dst *Value[Bounds]
	}{{"HOST_BOUNDS", &h.HostBounds}, {"CHIPS_PER_HOST_BOUNDS", &h.ChipsPerHostBounds}} {
		if v, ok := kv[b.key]; ok && !b.dst.IsSet() {
			bb, err := ParseBounds(v)
			if err != nil {
				return md.parsed(KeyTPUEnv, fmt.Errorf("%s: %w", b.key, err))
			}
			*b.dst = val(bb, src)
		}
	}
	for _, k := range []string{"MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID", "MEGASCALE_PORT"} {
		if v, ok := kv[k]; ok && v != "" {
			if h.Megascale == nil {
				h.Megascale = map[string]Value[string]{}
			}
			if _, given := h.Megascale[k]; !given {
				h.Megascale[k] = val(v, src)
			}
		}
	}
	if h.Accelerator.V.Hosts() == 1 {
		return nil
	}
	if !h.WorkerID.IsSet() {
		v, ok := kv["WORKER_ID"]
		wsrc := src
		if !ok {
			if v, err = md.Get(ctx, KeyWorkerNumber); err != nil {
				return err
			}
			wsrc = Metadata(md.URL(KeyWorkerNumber))
		}
		n, err := ParseIndex(v)
		if err != nil {
			return md.parsed(KeyWorkerNumber, err)
		}
		h.WorkerID = val(n, wsrc)
	}
	if !h.Hostnames.IsSet() {
		body, err := md.Get(ctx, KeyEndpoints)
		if err != nil {
			return err
		}
		hosts, err := ParseEndpoints(body)
		if err != nil {
			return md.parsed(KeyEndpoints, err)
		}
		h.Hostnames = val(hosts, Metadata(md.URL(KeyEndpoints)))
	}
	return nil
}

// finishSlice derives the bounds and the usable chips, and checks that the slice description holds together.
func (d *detector) finishSlice() error {
	h := d.h
	a := h.Accelerator
	if a.IsSet() {
		if !h.HostBounds.IsSet() {
			h.HostBounds = val(a.V.HostBounds(), DerivedFrom(a.Source))
		}
		if !h.ChipsPerHostBounds.IsSet() {
			h.ChipsPerHostBounds = val(a.V.ChipsPerHostBounds(), DerivedFrom(a.Source))
		}
		if hosts := a.V.Hosts(); hosts > 1 && h.Hostnames.IsSet() && len(h.Hostnames.V) != hosts {
			return &ConfigError{Name: h.Hostnames.Source.Name, Value: strconv.Quote(strings.Join(h.Hostnames.V, ",")),
				Problem: fmt.Sprintf("lists %d hosts but %s has %d", len(h.Hostnames.V), a.V.Type, hosts),
				Sources: []Source{h.Hostnames.Source, a.Source}, Hint: "list every host of the slice in worker order"}
		}
		if cph := a.V.ChipsPerHost(); h.ChipsSource.Kind == FromSysfs && len(h.Chips) != cph {
			return &ConfigError{Name: "accelerator type", Value: a.V.Type,
				Problem: fmt.Sprintf("has %d chips per host but this host has %d", cph, len(h.Chips)),
				Sources: []Source{a.Source, h.ChipsSource}, Hint: "fix or unset " + a.Source.Name}
		}
	} else {
		if !h.ChipsPerHostBounds.IsSet() {
			if b, err := ChipBounds(len(h.Chips)); err == nil {
				h.ChipsPerHostBounds = val(b, DerivedFrom(h.ChipsSource))
			}
		}
		if !h.HostBounds.IsSet() && len(h.Hostnames.V) <= 1 {
			h.HostBounds = val(Bounds{1, 1, 1}, Default())
		}
	}
	if len(h.Hostnames.V) > 1 {
		if !h.WorkerID.IsSet() {
			return &ConfigError{Name: h.Hostnames.Source.Name, Value: strconv.Quote(strings.Join(h.Hostnames.V, ",")),
				Problem: "describes several hosts but nothing says which one this is", Sources: []Source{h.Hostnames.Source},
				Hint: "set TPU_WORKER_ID (or --worker-id) to this host's index"}
		}
		if h.WorkerID.V >= len(h.Hostnames.V) {
			return &ConfigError{Name: h.WorkerID.Source.Name, Value: strconv.Itoa(h.WorkerID.V),
				Problem: fmt.Sprintf("is not an index of the %d hosts", len(h.Hostnames.V)),
				Sources: []Source{h.WorkerID.Source, h.Hostnames.Source}, Choices: indexChoices(len(h.Hostnames.V))}
		}
	}
	if !h.WorkerID.IsSet() {
		h.WorkerID = val(0, Default())
	}
	all := make([]int, len(h.Chips))
	for i := range all {
		all[i] = i
	}
	h.Usable = val(all, h.ChipsSource)
	if h.VisibleChips.IsSet() {
		for _, c := range h.VisibleChips.V {
			if c >= len(h.Chips) {
				return &ConfigError{Name: "TPU_VISIBLE_CHIPS", Value: strconv.Quote(joinInts(h.VisibleChips.V, ",")),
					Problem: fmt.Sprintf("names chip %d but this host has %d chips", c, len(h.Chips)),
					Sources: []Source{h.VisibleChips.Source, h.ChipsSource}, Choices: indexChoices(len(h.Chips))}
			}
		}
		h.Usable = val(h.VisibleChips.V, h.VisibleChips.Source)
	}
	if h.NumDevices.IsSet() {
		n := h.NumDevices.V
		if n > len(h.Usable.V) {
			return &ConfigError{Name: "TPU_NUM_DEVICES", Value: strconv.Itoa(n),
				Problem: fmt.Sprintf("asks for more chips than the %d available", len(h.Usable.V)),
				Sources: []Source{h.NumDevices.Source, h.Usable.Source}, Choices: splitChoices(len(h.Usable.V)), Hint: "or unset it"}
		}
		h.Usable = val(h.Usable.V[:n], h.NumDevices.Source)
	}
	return nil
}

func indexChoices(n int) []string {
	out := make([]string, 0, n)
	for i := 0; i < n && i < 16; i++ {
		out = append(out, strconv.Itoa(i))
	}
	if n > 16 {
		out = append(out, fmt.Sprintf("... %d", n-1))
	}
	return out
}

func joinInts(xs []int, sep string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, sep)
}
