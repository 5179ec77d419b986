package launcher_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"tpurun/internal/safepath"
	"tpurun/launcher"
	"tpurun/launcher/topology"
	"tpurun/rendezvous"
)

// TestExitCodeUsageErrors: every configuration error of every layer exits 2, bare or wrapped, by the mark it
// carries (exitcode.IsUsage); the other sentinels keep their own codes. The list is the one ExitCode held before the
// errors carried the mark.
func TestExitCodeUsageErrors(t *testing.T) {
	usage := []error{
		launcher.ErrConfig, safepath.ErrUnsafePath, launcher.ErrNoToken, rendezvous.ErrConfig, rendezvous.ErrNoToken,
		topology.ErrConfig, topology.ErrParse, topology.ErrUnknownDevice, topology.ErrMetadata, topology.ErrPortBusy,
		topology.ErrChipBusy,
		&launcher.ConfigError{Field: "nprocs", Value: "x", Hint: "a number"},
		&safepath.UnsafePathError{Root: "/logs", Path: "a/b", Link: "a"},
		&rendezvous.Error{Kind: rendezvous.ErrConfig, Field: rendezvous.FieldNodes},
		&rendezvous.Error{Kind: rendezvous.ErrNoToken, Field: rendezvous.FieldListen},
		&topology.ConfigError{Name: "TPU_NUM_DEVICES", Value: "x", Problem: "is not a number"},
		&topology.UnknownDeviceError{Count: 1, IDs: []string{"0x0099"}},
		&topology.MetadataError{URL: "http://metadata", Err: errors.New("refused")},
		&topology.PortBusyError{Port: 8476},
		&topology.BusyError{Holders: []topology.Holder{{Path: "/dev/accel0", PID: 1}}},
	}
	for _, err := range usage {
		for _, e := range []error{err, fmt.Errorf("detect: %w", err), errors.Join(errors.New("first"), err)} {
			if got := launcher.ExitCode(e); got != launcher.ExitUsage {
				t.Errorf("ExitCode(%T %v) = %d, want %d", e, e, got, launcher.ExitUsage)
			}
		}
	}
	others := []struct {
		err  error
		code int
	}{
		{launcher.ErrTimeout, launcher.ExitTimeout},
		{launcher.ErrRendezvous, launcher.ExitRendezvous},
		{fmt.Errorf("%w: %w", launcher.ErrRendezvous, rendezvous.ErrNodeLost), launcher.ExitRendezvous},
		{fmt.Errorf("%w: %w", launcher.ErrRendezvous, rendezvous.ErrConfig), launcher.ExitUsage}, // configuration first
		{launcher.ErrResults, launcher.ExitResults},
		{rendezvous.ErrNodeLost, launcher.ExitInternal},
		{context.Canceled, 128 + int(syscall.SIGTERM)},
		{&launcher.SignalError{Signal: syscall.SIGINT}, 128 + int(syscall.SIGINT)},
		{&launcher.OutputError{Stream: "stdout", Err: syscall.EPIPE}, 128 + int(syscall.SIGPIPE)},
		{errors.New("anything else"), launcher.ExitInternal},
	}
	for _, tc := range others {
		if got := launcher.ExitCode(tc.err); got != tc.code {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.code)
		}
	}
}
