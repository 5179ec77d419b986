package failure_test

import (
	"errors"
	"fmt"
	"testing"

	"tpurun/internal/failure"
)

// badSetting is a configuration error of some package: it names its setting.
type badSetting struct{ s failure.Setting }

func (e *badSetting) Error() string            { return string(e.s) + " is bad" }
func (e *badSetting) Setting() failure.Setting { return e.s }

// TestOfFindsTheSettingInTheChain: Of finds the setting of a configuration error however it is wrapped, and names
// none for an error that is not one.
func TestOfFindsTheSettingInTheChain(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want failure.Setting
	}{
		{nil, ""},
		{errors.New("not about a setting"), ""},
		{&badSetting{failure.Grace}, failure.Grace},
		{fmt.Errorf("attempt 0: %w", &badSetting{failure.RendezvousEndpoint}), failure.RendezvousEndpoint},
		{errors.Join(errors.New("first"), &badSetting{failure.Named("TPU_NUM_DEVICES")}), "TPU_NUM_DEVICES"},
	} {
		if got := failure.SettingOf(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestWordIsTheRendezvousOwn: a rendezvous setting's word is the rendezvous's own (its messages say "rendezvous"
// already); any other setting's word is the setting.
func TestWordIsTheRendezvousOwn(t *testing.T) {
	for s, want := range map[failure.Setting]string{
		failure.RendezvousEndpoint: "endpoint", failure.RendezvousNodes: "node count", failure.RendezvousRunID: "run id",
		failure.Grace: "grace period", failure.Named("MASTER_ADDR"): "MASTER_ADDR",
	} {
		if got := s.Word(); got != want {
			t.Errorf("%q.Word() = %q, want %q", s, got, want)
		}
	}
}
