package topology

import (
	"fmt"
	"strings"

	"tpurun/internal/failure"
)

// Sentinels callers branch on with errors.Is. Each is a configuration error (it matches failure.ErrConfig: the CLI
// exits 2 on it), as is every typed error below that matches one.
var (
	// ErrConfig marks a configuration error: bad flags or env, an impossible split. The CLI exits 2 on it.
	ErrConfig = failure.NewConfigKind("topology configuration error")
	// ErrParse marks a value that does not parse (wrapped by ConfigError for env and flags). The errors it marks
	// read as the detail alone; the message around them says the value is malformed.
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

// ConfigError is a configuration error that names the setting, its value, where the value came from and the valid
// choices. errors.Is(err, ErrConfig) is true; errors.Is(err, ErrParse) is true when the value did not parse.
type ConfigError struct {
	Name    failure.Setting // the setting or variable: failure.NProcs, "TPU_NUM_DEVICES"
	Value   string          // the offending value as given
	Problem string          // what is wrong, e.g. "is not a valid split of the 8 v5e chips on this host"
	Sources []Source        // where the conflicting facts came from
	Choices []string        // the valid choices, if a finite list
	Hint    string          // what else to do, e.g. "or leave it unset"
	Err     error           // the underlying cause, if any
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Name))
	if e.Value != "" {
		b.WriteString(" ")
		b.WriteString(e.Value)
	}
	b.WriteString(" ")
	b.WriteString(e.Problem)
	if len(e.Sources) > 0 {
		b.WriteString(" (")
		b.WriteString(sourceList(e.Sources))
		b.WriteString(")")
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if len(e.Choices) > 0 {
		b.WriteString("; use ")
		b.WriteString(orList(e.Choices))
	}
	if e.Hint != "" {
		if len(e.Choices) > 0 {
			b.WriteString(", ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(e.Hint)
	}
	return b.String()
}

// Setting is the setting the error is about (Name).
func (e *ConfigError) Setting() failure.Setting { return e.Name }

// Is makes errors.Is(err, ErrConfig) and errors.Is(err, failure.ErrConfig) true.
func (e *ConfigError) Is(target error) bool {
	return target == ErrConfig || target == failure.ErrConfig
}

// Unwrap returns the underlying cause.
func (e *ConfigError) Unwrap() error { return e.Err }

// sourceList renders sources for a message: "from flag --nprocs, env TPU_NUM_DEVICES". A derived source names
// itself ("derived from env TPU_ACCELERATOR_TYPE"), so the derived ones follow the others after a semicolon
// rather than read "from derived from ...". A source listed twice is named once.
func sourceList(sources []Source) string {
	var given, derived []string
	seen := map[Source]bool{}
	for _, s := range sources {
		if seen[s] {
			continue
		}
		seen[s] = true
		if s.Kind == FromDerived {
			derived = append(derived, s.String())
		} else {
			given = append(given, s.String())
		}
	}
	var parts []string
	if len(given) > 0 {
		parts = append(parts, "from "+strings.Join(given, ", "))
	}
	if len(derived) > 0 {
		parts = append(parts, strings.Join(derived, ", "))
	}
	return strings.Join(parts, "; ")
}

// parseError is a value that does not parse. Its text is the detail alone (`"abc" is not a positive whole number`):
// the message around it already says the value is malformed. errors.Is(err, ErrParse) is true.
type parseError struct{ msg string }

func parseErrorf(format string, args ...any) error {
	return &parseError{msg: fmt.Sprintf(format, args...)}
}

func (e *parseError) Error() string { return e.msg }

// Is makes errors.Is(err, ErrParse) and errors.Is(err, failure.ErrConfig) true.
func (e *parseError) Is(target error) bool { return target == ErrParse || target == failure.ErrConfig }

// orList renders "1", "1 or 2", "1, 2, 4 or 8".
func orList(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

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

// Is makes errors.Is(err, ErrUnknownDevice) true, and errors.Is(err, ErrConfig) and errors.Is(err,
// failure.ErrConfig): the remedy is configuration (TPU_ACCELERATOR_TYPE), so the CLI exits 2 before starting.
func (e *UnknownDeviceError) Is(target error) bool {
	return target == ErrUnknownDevice || target == ErrConfig || target == failure.ErrConfig
}

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

// Is makes errors.Is(err, ErrMetadata) and errors.Is(err, failure.ErrConfig) true (exit 2).
func (e *MetadataError) Is(target error) bool {
	return target == ErrMetadata || target == failure.ErrConfig
}

// Unwrap returns the cause (a net error, context.DeadlineExceeded, ErrParse...).
func (e *MetadataError) Unwrap() error { return e.Err }

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

// Is makes errors.Is(err, ErrPortBusy) and errors.Is(err, failure.ErrConfig) true (exit 2).
func (e *PortBusyError) Is(target error) bool {
	return target == ErrPortBusy || target == failure.ErrConfig
}

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

// Is makes errors.Is(err, ErrChipBusy) and errors.Is(err, failure.ErrConfig) true (exit 2).
func (e *BusyError) Is(target error) bool {
	return target == ErrChipBusy || target == failure.ErrConfig
}
