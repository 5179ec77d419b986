package cli_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/spf13/pflag"

	"tpurun/cmd/tpurun/internal/cli"
	"tpurun/internal/failure"
	"tpurun/internal/setting"
)

// TestBindNamesTheFlagOfASetting: a setting bound beside its flag's definition is named by that flag, found from
// an error about it; a flag binds every setting it was bound to; a setting bound to no flag, or no setting, is
// named by none.
func TestBindNamesTheFlagOfASetting(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.Duration("grace", 0, "")
	cli.Bind(fs, "grace", setting.Grace)
	fs.String("nnodes", "1", "")
	cli.Bind(fs, "nnodes", setting.NNodes)
	cli.Bind(fs, "nnodes", setting.RendezvousNodes, setting.RendezvousMinNodes)
	fs.String("tee", "", "")
	err := fmt.Errorf("attempt 0: %w", &failure.ConfigError{Field: setting.Grace, Value: "-1s", Hint: "must not be negative"})
	for s, want := range map[setting.Setting]string{
		setting.Of(err): "--grace", setting.RendezvousMinNodes: "--nnodes", setting.NNodes: "--nnodes",
		setting.Timeout: "", setting.Of(errors.New("not about a setting")): "",
	} {
		if got := cli.FlagOf(fs, s); got != want {
			t.Errorf("FlagOf(%q) = %q, want %q", s, got, want)
		}
	}
	if got := cli.FlagOf(nil, setting.Grace); got != "" {
		t.Errorf("FlagOf(nil, grace) = %q", got)
	}
	want := map[string][]string{"grace": {"grace period"}, "nnodes": {"nnodes", "rendezvous node count", "rendezvous minimum node count"}}
	if got := cli.Bound(fs); !reflect.DeepEqual(got, want) {
		t.Errorf("Bound = %v, want %v", got, want)
	}
}

// TestBindRefusesAFlagThatIsNot: binding a name that is not a flag is a mistake of the program, found at once.
func TestBindRefusesAFlagThatIsNot(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Bind of an undefined flag did not panic")
		}
	}()
	cli.Bind(pflag.NewFlagSet("x", pflag.ContinueOnError), "grace", setting.Grace)
}
