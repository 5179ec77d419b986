package cli

import (
	"cmp"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"tpurun/internal/failure"
	"tpurun/internal/topology"
)

// Device holds the flags that say which devices to use and how to split them: shared by the run path,
// `tpurun plan` and `tpurun doctor`.
type Device struct {
	device          string
	nprocs          nprocsState
	spmd            bool
	isolateGPUs     bool
	tpuPortBase     int
	metadataTimeout time.Duration
	acceleratorType string
	Force           bool // --force: start although another process holds a chip
	sysfsRoot       string
	devRoot         string
	procRoot        string
}

// AddDevice registers the device flags on fs; the hidden root flags point detection at a fake OS tree.
func AddDevice(fs *pflag.FlagSet) *Device {
	d := &Device{}
	fs.StringVar(&d.device, "device", "auto", "device to run on: auto (TPU > GPU > CPU), cpu, gpu or tpu")
	Bind(fs, "device", failure.Device)
	fs.Var(&nprocsFlag{st: &d.nprocs, name: "nprocs"}, "nprocs",
		"number of worker processes on this host (default: one per chip or GPU; 1 on CPU)")
	fs.Var(&nprocsFlag{st: &d.nprocs, name: "nproc-per-node"}, "nproc-per-node",
		"torchrun's spelling: a number like --nprocs, or auto (one per device), cpu (one per CPU core), gpu or tpu (one per device of that kind)")
	fs.BoolVar(&d.isolateGPUs, "isolate-gpus", false, "give each GPU worker CUDA_VISIBLE_DEVICES=<its GPU> (torchrun leaves it alone: every worker sees every GPU)")
	fs.BoolVar(&d.spmd, "spmd", false, "SPMD: one process per host that sees all local chips (XLA_USE_SPMD=1)")
	fs.IntVar(&d.tpuPortBase, "tpu-port-base", topology.DefaultTPUPortBase, "first TPU_PROCESS_PORT; local rank r gets base+r")
	fs.DurationVar(&d.metadataTimeout, "metadata-timeout", topology.DefaultMetadataBudget,
		"total time allowed for GCE metadata queries (only made when env and sysfs do not describe the TPU slice)")
	fs.StringVar(&d.acceleratorType, "accelerator-type", "", "TPU accelerator type, e.g. v4-8 or v5litepod-8 (overrides TPU_ACCELERATOR_TYPE)")
	Bind(fs, "accelerator-type", failure.AcceleratorType)
	fs.BoolVar(&d.Force, "force", false, "start even when another process holds a chip's device node open")
	fs.StringVar(&d.sysfsRoot, "sysfs-root", "", "root of sysfs (default /sys or TPURUN_SYSFS_ROOT)")
	fs.StringVar(&d.devRoot, "dev-root", "", "root of the device nodes (default /dev or TPURUN_DEV_ROOT)")
	fs.StringVar(&d.procRoot, "proc-root", "", "root of procfs (default /proc or TPURUN_PROC_ROOT)")
	for _, name := range []string{"sysfs-root", "dev-root", "proc-root"} {
		_ = fs.MarkHidden(name)
	}
	return d
}

// nprocsState is what --nprocs / --nproc-per-node said: a count (0 = unset: one per device) or a device word.
type nprocsState struct {
	n      int
	device string // "auto", "cpu", "gpu" or "tpu" from --nproc-per-node; "" for a count
	flag   string // the flag that set it last; "" when unset
}

// nprocsFlag is one spelling of the nprocs flag; both spellings share one nprocsState (the last one given wins).
type nprocsFlag struct {
	st   *nprocsState
	name string
}

func (f *nprocsFlag) Set(s string) error {
	n, dev, err := ParseNProcs(f.name, s)
	if err != nil {
		return err
	}
	*f.st = nprocsState{n: n, device: dev, flag: f.name}
	return nil
}

func (f *nprocsFlag) String() string {
	switch {
	case f.st == nil || f.st.flag == "":
		return ""
	case f.st.device != "":
		return f.st.device
	}
	return strconv.Itoa(f.st.n)
}

func (f *nprocsFlag) Type() string {
	if f.name == "nprocs" {
		return "N"
	}
	return "spec"
}

// Options turns the flags into what topology.Detect needs.
func (d *Device) Options() (topology.Options, error) {
	dev := d.device
	if w := d.nprocs.device; w != "" && w != "auto" {
		given := strings.ToLower(strings.TrimSpace(dev))
		if named, ok := topology.DeviceNamed(given); given != "" && given != "auto" && (!ok || string(named) != w) {
			return topology.Options{}, &failure.ConfigError{Kind: topology.ErrConfig, Field: "--nproc-per-node", Value: w,
				Problem: "contradicts --device " + dev, Sources: []failure.Source{topology.Flag("nproc-per-node"), topology.Flag("device")},
				Choices: []string{"--nproc-per-node " + given, "--device " + w}, Hint: "or give only one of them"}
		}
		dev = w
	}
	if d.tpuPortBase < 1 || d.tpuPortBase > 65535 {
		return topology.Options{}, &failure.ConfigError{Kind: topology.ErrConfig, Field: "--tpu-port-base", Value: strconv.Itoa(d.tpuPortBase),
			Problem: "is not a TCP port", Sources: []failure.Source{topology.Flag("tpu-port-base")}, Hint: "use a port from 1 to 65535 (default 8476)"}
	}
	if d.metadataTimeout <= 0 {
		return topology.Options{}, &failure.ConfigError{Kind: topology.ErrConfig, Field: "--metadata-timeout", Value: d.metadataTimeout.String(),
			Problem: "must be positive", Sources: []failure.Source{topology.Flag("metadata-timeout")}, Hint: "e.g. 3s"}
	}
	opts := topology.Options{
		Device:          dev,
		AcceleratorType: d.acceleratorType,
		SPMD:            d.spmd,
		MetadataBudget:  d.metadataTimeout,
	}
	// Device nodes are matched against /proc/*/fd links, which are absolute: every root is made absolute (an
	// unset one is read by detection from TPURUN_<NAME>_ROOT).
	roots := []*string{&opts.SysfsRoot, &opts.DevRoot, &opts.ProcRoot}
	for i, r := range []struct{ flag, env string }{{d.sysfsRoot, "TPURUN_SYSFS_ROOT"}, {d.devRoot, "TPURUN_DEV_ROOT"}, {d.procRoot, "TPURUN_PROC_ROOT"}} {
		if p := cmp.Or(r.flag, os.Getenv(r.env)); p != "" {
			*roots[i], _ = filepath.Abs(p)
		}
	}
	return opts, nil
}

// Request turns the flags into the plan request; perCPU is torchrun's "cpu" (and "auto" on a host without
// accelerators): one process per CPU core.
func (d *Device) Request() (req topology.Request, perCPU bool) {
	req = topology.Request{NProcs: d.nprocs.n, SPMD: d.spmd, TPUPortBase: d.tpuPortBase, IsolateGPUs: d.isolateGPUs}
	if d.nprocs.flag != "" {
		req.NProcsSource = topology.Flag(d.nprocs.flag)
	}
	w := d.nprocs.device // auto, on a host without accelerators, is one worker per core too
	return req, w == "auto" || (w != "" && topology.Device(w).Kind().PerCore())
}
