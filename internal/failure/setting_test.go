package failure_test

import (
	"errors"
	"fmt"
	"testing"

	"tpurun/internal/setting"
)

// badSetting is a configuration error of some package: it names its setting.
type badSetting struct{ s setting.Setting }

func (e *badSetting) Error() string            { return string(e.s) + " is bad" }
func (e *badSetting) Setting() setting.Setting { return e.s }

// TestOfFindsTheSettingInTheChain: Of finds the setting of a configuration error however it is wrapped, and names
// none for an error that is not one.
func TestOfFindsTheSettingInTheChain(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want setting.Setting
	}{
		{nil, ""},
		{errors.New("not about a setting"), ""},
		{&badSetting{setting.Grace}, setting.Grace},
		{fmt.Errorf("attempt 0: %w", &badSetting{setting.RendezvousEndpoint}), setting.RendezvousEndpoint},
		{errors.Join(errors.New("first"), &badSetting{setting.Named("TPU_NUM_DEVICES")}), "TPU_NUM_DEVICES"},
	} {
		if got := setting.Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestWordIsTheRendezvousOwn: a rendezvous setting's word is the rendezvous's own (its messages say "rendezvous"
// already); any other setting's word is the setting.
func TestWordIsTheRendezvousOwn(t *testing.T) {
	for s, want := range map[setting.Setting]string{
		setting.RendezvousEndpoint: "endpoint", setting.RendezvousNodes: "node count", setting.RendezvousRunID: "run id",
		setting.Grace: "grace period", setting.Named("MASTER_ADDR"): "MASTER_ADDR",
	} {
		if got := s.Word(); got != want {
			t.Errorf("%q.Word() = %q, want %q", s, got, want)
		}
	}
}
