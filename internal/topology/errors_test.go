package topology_test

import (
	"errors"
	"fmt"
	"testing"

	"tpurun/internal/failure"
	"tpurun/internal/topology"
)

// TestErrorsAreConfigErrors: every error of topology, its sentinels and its typed errors, bare or wrapped, matches
// failure.ErrConfig and exits 2 (the CLI's usage exit, before anything starts), and keeps matching its own sentinel.
func TestErrorsAreConfigErrors(t *testing.T) {
	for _, tc := range []struct{ err, own error }{
		{topology.ErrConfig, topology.ErrConfig}, {topology.ErrParse, topology.ErrParse},
		{topology.ErrUnknownDevice, topology.ErrUnknownDevice}, {topology.ErrMetadata, topology.ErrMetadata},
		{topology.ErrPortBusy, topology.ErrPortBusy}, {topology.ErrChipBusy, topology.ErrChipBusy},
		{&failure.ConfigError{Kind: topology.ErrConfig, Field: failure.Named("TPU_NUM_DEVICES"), Value: "x", Problem: "is not a number"}, topology.ErrConfig},
		{&topology.UnknownDeviceError{Count: 1, IDs: []string{"0x0099"}}, topology.ErrUnknownDevice},
		{&topology.MetadataError{URL: "http://metadata", Err: errors.New("refused")}, topology.ErrMetadata},
		{&topology.PortBusyError{Port: 8476}, topology.ErrPortBusy},
		{&topology.BusyError{Holders: []topology.Holder{{Path: "/dev/accel0", PID: 1}}}, topology.ErrChipBusy},
	} {
		for _, e := range []error{tc.err, fmt.Errorf("detect: %w", tc.err), errors.Join(errors.New("first"), tc.err)} {
			if !errors.Is(e, failure.ErrConfig) || !errors.Is(e, tc.own) {
				t.Errorf("%T %v: errors.Is(ErrConfig) %v, errors.Is(%v) %v", e, e, errors.Is(e, failure.ErrConfig),
					tc.own, errors.Is(e, tc.own))
			}
			if got := failure.ExitCode(e); got != failure.ExitUsage {
				t.Errorf("ExitCode(%T %v) = %d, want %d", e, e, got, failure.ExitUsage)
			}
		}
	}
}
