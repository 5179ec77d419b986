package topology

import (
	"fmt"
	"strings"

	"tpurun/internal/failure"
)

// Sentinels callers branch on with errors.Is. Each matches failure.ErrConfig (exit 2), as does every typed error
// below.
var (
	// ErrConfig marks a configuration error: bad flags or env, an impossible split.
	ErrConfig = failure.NewConfigKind("topology configuration error")
	// ErrParse marks a value that does not parse (wrapped by a *failure.ConfigError for env and flags).
	ErrParse = failure.NewConfigKind("malformed value")
	// ErrUnknownDevice marks Google PCI devices whose device id tpurun does not know.
	ErrUnknownDevice = failure.NewConfigKind("unknown Google PCI device id")
	// ErrMetadata marks a failed GCE metadata query (see *MetadataError).
	ErrMetadata = failure.NewConfigKind("GCE metadata query failed")
	// ErrPortBusy marks a TPU process port that is in use and cannot be moved (see *PortBusyError).
	ErrPortBusy = failure.NewConfigKind("TPU process port busy")
	// ErrChipBusy marks a chip whose device node another process holds open (see *BusyError).
	ErrChipBusy = failure.NewConfigKind("TPU chip in use by another process")
)

// sources are where the facts of a *failure.ConfigError came from.
type sources = []failure.Source

// parseError is a value that does not parse; its text is the detail alone (`"abc" is not a positive whole number`),
// as the message around it says the value is malformed.
type parseError struct{ msg string }

func parseErrorf(format string, args ...any) error {
	return &parseError{msg: fmt.Sprintf(format, args...)}
}

func (e *parseError) Error() string { return e.msg }

// Is makes errors.Is(err, ErrParse) and errors.Is(err, failure.ErrConfig) true.
func (e *parseError) Is(target error) bool { return target == ErrParse || target == failure.ErrConfig }

// UnknownDeviceError reports Google PCI devices with device ids missing from the table.
type UnknownDeviceError struct {
	Count    int      // how many Google PCI devices were found
	IDs      []string // their unknown device ids, e.g. "0x0099"
	Location string   // the sysfs directory scanned
}

func (e *UnknownDeviceError) Error() string {
	return fmt.Sprintf("found %d Google PCI devices with unknown device id %s under %s; set TPU_ACCELERATOR_TYPE or upgrade tpurun",
		e.Count, strings.Join(e.IDs, ", "), e.Location)
}

// Unwrap makes errors.Is(err, ErrUnknownDevice), ErrConfig and failure.ErrConfig true: the remedy is configuration.
func (e *UnknownDeviceError) Unwrap() []error { return []error{ErrUnknownDevice, ErrConfig} }

// MetadataError is a failed GCE metadata query: the URL, the HTTP status (0 when no answer) and the cause, plus the
// env vars that replace the query.
type MetadataError struct {
	URL      string
	Status   int
	Attempts int
	Err      error
}

// metadataRemedy names the env vars that describe a slice without the metadata server.
const metadataRemedy = "set TPU_SKIP_MDS_QUERY=1 and describe the slice with TPU_ACCELERATOR_TYPE, TPU_WORKER_ID and " +
	"TPU_WORKER_HOSTNAMES (optionally TPU_HOST_BOUNDS, TPU_CHIPS_PER_HOST_BOUNDS), or point GCE_METADATA_HOST at a reachable server"

func (e *MetadataError) Error() string {
	status := ""
	if e.Status != 0 {
		status = fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	return fmt.Sprintf("GCE metadata %s%s failed after %d attempt(s): %v; %s", e.URL, status, e.Attempts, e.Err, metadataRemedy)
}

// Unwrap returns ErrMetadata (and so failure.ErrConfig) and the cause (a net error, context.DeadlineExceeded...).
func (e *MetadataError) Unwrap() []error { return []error{ErrMetadata, e.Err} }

// PortBusyError is a TPU process port that is in use and must stay fixed (multi-host).
type PortBusyError struct {
	Port      int
	LocalRank int
	PID       int    // 0 when the holder could not be found
	Command   string // the holder's command, when found
}

func (e *PortBusyError) Error() string {
	holder := "a process tpurun could not identify (not visible in /proc)"
	if e.PID > 0 {
		holder = fmt.Sprintf("pid %d (%s)", e.PID, e.Command)
	}
	return fmt.Sprintf("TPU_PROCESS_PORT %d for local rank %d is in use by %s; every host of a multi-host slice must use the same ports: stop that process or choose another --tpu-port-base on all hosts",
		e.Port, e.LocalRank, holder)
}

// Unwrap makes errors.Is(err, ErrPortBusy) and errors.Is(err, failure.ErrConfig) true (exit 2).
func (e *PortBusyError) Unwrap() error { return ErrPortBusy }

// BusyError reports chips whose device nodes other processes hold open.
type BusyError struct {
	Holders []Holder
}

func (e *BusyError) Error() string {
	parts := make([]string, len(e.Holders))
	for i, h := range e.Holders {
		parts[i] = fmt.Sprintf("%s held by pid %d (%s)", h.Path, h.PID, h.Command)
	}
	return "TPU device already in use: " + strings.Join(parts, "; ") + "; stop that process, or start anyway with --force"
}

// Unwrap makes errors.Is(err, ErrChipBusy) and errors.Is(err, failure.ErrConfig) true (exit 2).
func (e *BusyError) Unwrap() error { return ErrChipBusy }
