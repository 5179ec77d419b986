package failure_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"tpurun/internal/failure"
	"tpurun/internal/safepath"
	"tpurun/internal/topology"
	"tpurun/rendezvous"
)

// TestExitCodeUsageErrors: every configuration error of every layer exits 2, bare or wrapped, by the mark it
// carries (failure.ErrConfig); the other sentinels keep their own codes. The list is the one ExitCode held before the
// errors carried the mark.
func TestExitCodeUsageErrors(t *testing.T) {
	usage := []error{
		failure.ErrConfig, safepath.ErrUnsafePath, rendezvous.ErrNoToken, rendezvous.ErrConfig, rendezvous.ErrNoToken,
		topology.ErrConfig, topology.ErrParse, topology.ErrUnknownDevice, topology.ErrMetadata, topology.ErrPortBusy,
		topology.ErrChipBusy,
		&failure.ConfigError{Field: "nprocs", Value: "x", Hint: "a number"},
		&safepath.UnsafePathError{Root: "/logs", Path: "a/b", Link: "a"},
		&rendezvous.Error{Kind: rendezvous.ErrConfig, Field: string(failure.RendezvousNodes)},
		&rendezvous.Error{Kind: rendezvous.ErrNoToken, Field: string(failure.RendezvousListen)},
		&topology.ConfigError{Name: "TPU_NUM_DEVICES", Value: "x", Problem: "is not a number"},
		&topology.UnknownDeviceError{Count: 1, IDs: []string{"0x0099"}},
		&topology.MetadataError{URL: "http://metadata", Err: errors.New("refused")},
		&topology.PortBusyError{Port: 8476},
		&topology.BusyError{Holders: []topology.Holder{{Path: "/dev/accel0", PID: 1}}},
	}
	for _, err := range usage {
		for _, e := range []error{err, fmt.Errorf("detect: %w", err), errors.Join(errors.New("first"), err)} {
			if got := failure.ExitCode(e); got != failure.ExitUsage {
				t.Errorf("ExitCode(%T %v) = %d, want %d", e, e, got, failure.ExitUsage)
			}
		}
	}
	others := []struct {
		err  error
		code int
	}{
		{failure.ErrTimeout, failure.ExitTimeout},
		{failure.ErrRendezvous, failure.ExitRendezvous},
		{fmt.Errorf("%w: %w", failure.ErrRendezvous, rendezvous.ErrNodeLost), failure.ExitRendezvous},
		{fmt.Errorf("%w: %w", failure.ErrRendezvous, rendezvous.ErrConfig), failure.ExitUsage}, // configuration first
		{failure.ErrResults, failure.ExitResults},
		{rendezvous.ErrNodeLost, failure.ExitInternal},
		{context.Canceled, 128 + int(syscall.SIGTERM)},
		{&failure.SignalError{Signal: syscall.SIGINT}, 128 + int(syscall.SIGINT)},
		{&failure.OutputError{Stream: "stdout", Err: syscall.EPIPE}, 128 + int(syscall.SIGPIPE)},
		{errors.New("anything else"), failure.ExitInternal},
	}
	for _, tc := range others {
		if got := failure.ExitCode(tc.err); got != tc.code {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.code)
		}
	}
}
