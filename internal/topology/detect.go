package topology

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

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
	// NodeHosts and NodeRank place this host among the job's nodes for a rendezvous, from the first source that
	// is set: the slice's host list (TPU_WORKER_HOSTNAMES or the metadata server, with TPU_WORKER_ID), a batch
	// scheduler's (SLURM_JOB_NODELIST with SLURM_NODEID), or JOB_COMPLETION_INDEX for the rank alone. NodeErr is
	// why they could not be read on a host that is not a TPU (a TPU host fails detection instead); it is reported
	// only by a run that needs them, so a single-host run inside a SLURM job is not stopped by its variables.
	NodeHosts Value[[]string] `json:"node_hosts"`
	NodeRank  Value[int]      `json:"node_rank"`
	NodeErr   error           `json:"-"`
	SPMD      Value[bool]     `json:"spmd"`
	// Megascale holds MEGASCALE_* values given by env or tpu-env, copied to every worker.
	Megascale map[string]Value[string] `json:"megascale,omitempty"`
	// SkipMDS is the parent's TPU_SKIP_MDS_QUERY as given (GKE sets "true"), when set and not empty: torch_xla then
	// reads the slice from env, never from the metadata server, and so do the workers, which keep the value.
	SkipMDS Value[string] `json:"skip_mds"`
	// TorchXLAMetadata reports that the metadata server answered with everything torch_xla's own topology code
	// reads from it (tpu-env's ACCELERATOR_TYPE and WORKER_ID, and TPU_PROCESS_BOUNDS and
	// TPU_CHIPS_PER_PROCESS_BOUNDS from v4 on; worker-network-endpoints as name:uid:ip on several hosts), so that
	// workers may read the slice from it as xmp.spawn's children do (docs/TOPOLOGY.md).
	TorchXLAMetadata bool `json:"torch_xla_metadata"`
	// HostnameEndpoints reports that worker-network-endpoints listed host names only (the newer format, which JAX
	// reads and torch_xla's get_worker_ips does not).
	HostnameEndpoints bool `json:"hostname_endpoints,omitempty"`

	// GPU: the GPUs present and the ones this launcher may use (CUDA_VISIBLE_DEVICES of the parent). UsableGPUs
	// are physical GPU indices; when the parent's CUDA_VISIBLE_DEVICES names GPUs by UUID they are the positions in
	// it (what CUDA numbers cuda:0, cuda:1, ...), and CUDAVisible holds the entries as given.
	GPUs        []Chip          `json:"gpus,omitempty"`
	GPUSource   Source          `json:"gpu_source"`
	UsableGPUs  Value[[]int]    `json:"usable_gpus"`
	CUDAVisible Value[[]string] `json:"cuda_visible_devices"`

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

// device picks the device: --device, else PJRT_DEVICE, else the most preferred kind present on the host.
func (d *detector) device() error {
	if name := strings.ToLower(strings.TrimSpace(d.opts.Device)); name != "" && name != "auto" {
		dev, ok := DeviceNamed(name)
		if !ok {
			return &ConfigError{Name: SettingDevice, Value: strconv.Quote(d.opts.Device), Problem: "is not a device",
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
