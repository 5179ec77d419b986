package topology

import (
	"cmp"
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/failure"
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

	// The OS behind root directories; "" means the environment's, else the real one (see Roots).
	SysfsRoot, DevRoot, ProcRoot string

	// MetadataURL is the metadata server base URL; "" means GCE_METADATA_HOST, else http://metadata.google.internal.
	MetadataURL string
	// MetadataBudget bounds all metadata queries of one Detect together (--metadata-timeout); 0 means 3s.
	MetadataBudget time.Duration
}

// Roots are the OS roots Detect reads (Host's SysfsRoot, DevRoot, ProcRoot): each one given, else
// TPURUN_SYSFS_ROOT, TPURUN_DEV_ROOT, TPURUN_PROC_ROOT from LookupEnv, else /sys, /dev, /proc. The proc root is
// where detection looks for who holds a chip or a port; the launcher's own processes are always in proc.Root.
func (o Options) Roots() (sysfs, dev, proc string) {
	env := o.LookupEnv
	if env == nil {
		env = os.LookupEnv
	}
	root := func(given, envName, def string) string {
		v, _ := env(envName)
		return cmp.Or(given, v, def)
	}
	return root(o.SysfsRoot, "TPURUN_SYSFS_ROOT", "/sys"), root(o.DevRoot, "TPURUN_DEV_ROOT", "/dev"),
		root(o.ProcRoot, "TPURUN_PROC_ROOT", "/proc")
}

// Host is everything detected about this host, each value with its source: the device, what every kind's host
// has, and the state the device's kind detected, which only the kind's own code reads; accessors give callers what
// they need of it (AcceleratorType, Megascale, TPUFacts, CUDAVisible).
type Host struct {
	Device Value[Device] `json:"device"`
	// ReplicasPerChip counts the devices each chip shows (2 TensorCores on v2/v3 TPUs); 1 on every other host.
	ReplicasPerChip int `json:"replicas_per_chip"`
	// NodeHosts and NodeRank place this host among the job's nodes for a rendezvous: the slice's host list and
	// worker id, else SLURM_JOB_NODELIST and SLURM_NODEID, else JOB_COMPLETION_INDEX alone. NodeErr is why they
	// could not be read (not on a TPU, which fails detection instead), reported only by a run that needs them.
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

// stateOf is the host's detected state of type S: its kind's, or on a host of another kind an empty one (which
// nothing keeps).
func stateOf[S any](h *Host) *S {
	if s, ok := h.state.(*S); ok {
		return s
	}
	return new(S)
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
// metadata server is asked only for a TPU slice env does not describe, each key at most once, within
// opts.MetadataBudget; a single host whose metadata fails is planned from sysfs. Malformed values are
// *failure.ConfigError. log receives its debug logs and the fallback's warning; nil means none.
func Detect(ctx context.Context, opts Options, log *zap.Logger) (*Host, error) {
	d := &detector{opts: opts, env: opts.LookupEnv, log: cmp.Or(log, zap.NewNop())}
	if d.env == nil {
		d.env = os.LookupEnv
	}
	h := &Host{}
	h.SysfsRoot, h.DevRoot, h.ProcRoot = opts.Roots()
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

// lookup returns a non-empty env value.
func (d *detector) lookup(name string) (string, bool) {
	v, ok := d.env(name)
	if !ok || strings.TrimSpace(v) == "" {
		return "", false
	}
	return v, true
}

func envErr(name, value string, err error, hint string) error {
	return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named(name), Value: strconv.Quote(value), Problem: "is malformed", Sources: sources{Env(name)}, Err: err, Hint: hint}
}

// device picks the device: --device, else PJRT_DEVICE, else the most preferred kind present on the host.
func (d *detector) device() error {
	if name := strings.ToLower(strings.TrimSpace(d.opts.Device)); name != "" && name != "auto" {
		dev, ok := DeviceNamed(name)
		if !ok {
			return &failure.ConfigError{Kind: ErrConfig, Field: failure.Device, Value: strconv.Quote(d.opts.Device),
				Problem: "is not a device", Sources: sources{Flag("device")}, Choices: deviceChoices()}
		}
		d.h.Device = val(dev, Flag("device"))
		return nil
	}
	if v, ok := d.lookup("PJRT_DEVICE"); ok {
		k, ok := pjrtKind(strings.ToUpper(strings.TrimSpace(v)))
		if !ok {
			return &failure.ConfigError{Kind: ErrConfig, Field: failure.Named("PJRT_DEVICE"), Value: strconv.Quote(v),
				Problem: "is not a PJRT device", Sources: sources{Env("PJRT_DEVICE")}, Choices: pjrtChoices(), Hint: "or unset it"}
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
	d.h.SPMD = val(false, Default())
	parseBool := func(v string) (bool, error) { return strconv.ParseBool(strings.TrimSpace(v)) }
	return readEnv(d, &d.h.SPMD, parseBool, "use 1 or 0", "XLA_USE_SPMD")
}

// envNodes fills NodeHosts and NodeRank (see Host) on a host that is not a TPU, from TPU_WORKER_HOSTNAMES,
// TPU_WORKER_ID and JOB_COMPLETION_INDEX, else SLURM's variables; a malformed one is kept in NodeErr.
func (d *detector) envNodes() {
	h := d.h
	h.NodeErr = readEnv(d, &h.NodeHosts, ParseHostList, "list every host, comma-separated, in node order",
		"TPU_WORKER_HOSTNAMES")
	if h.NodeErr == nil && (h.NodeHosts.IsSet() || !d.slurmNodes()) {
		h.NodeErr = readEnv(d, &h.NodeRank, ParseIndex, nodeIndexHint, "TPU_WORKER_ID", "JOB_COMPLETION_INDEX")
	}
}

// slurmNodes fills NodeHosts and NodeRank from SLURM_JOB_NODELIST and SLURM_NODEID, reporting whether it is set.
func (d *detector) slurmNodes() bool {
	h := d.h
	h.NodeErr = readEnv(d, &h.NodeHosts, ParseSlurmNodelist, "fix the node list, or name the hosts another way",
		"SLURM_JOB_NODELIST")
	if h.NodeErr == nil && h.NodeHosts.IsSet() {
		h.NodeErr = readEnv(d, &h.NodeRank, ParseIndex, nodeIndexHint, "SLURM_NODEID")
	}
	return h.NodeErr != nil || h.NodeHosts.IsSet()
}

const nodeIndexHint = "use this node's index, from 0"
