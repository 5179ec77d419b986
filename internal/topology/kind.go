package topology

import (
	"context"
	"slices"
	"strings"

	"go.uber.org/zap"
)

// Device names a kind of accelerator as --device, --nproc-per-node and the plan's JSON spell it: "cpu", "gpu",
// "tpu". Its Kind says everything else about it.
type Device string

// A Kind is one kind of accelerator: how detection finds it on a host, what its workers are told, which device
// nodes its holders open and what doctor shows of it. Each kind registers itself once; the registry (Device.Kind)
// is the only place that looks kinds up.
type Kind interface {
	// Device is the kind's name.
	Device() Device
	// PerCore reports whether the kind runs on CPU cores (torchrun's --nproc-per-node cpu: one worker per core).
	PerCore() bool
	// FixedSlice reports whether the hosts of a world are one slice of chips: every host runs the same workers,
	// and one launcher owns each host.
	FixedSlice() bool
	// JAXCoordinator reports whether the workers need JAX_COORDINATOR_ADDRESS from the launcher.
	JAXCoordinator() bool
	// NCCL reports whether the workers' collectives run on NCCL, whose async error handling the launcher turns on.
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
	// usableNodes are the device nodes of the devices this launcher may use (CheckFree).
	usableNodes(h *Host) []string
	// settings are doctor's rows of the host after the device.
	settings(h *Host) []Setting
	// probe checks what doctor checks beyond the host (the metadata server); nil when nothing.
	probe(ctx context.Context, h *Host, opts Options, log *zap.Logger) *Probe
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
	if k, ok := byName[string(d)]; ok && k.Device() == d {
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
