package cli

import (
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"tpurun/internal/failure"
)

// SettingKey is the annotation of a flag that lists the names of the settings it sets (Bind).
const SettingKey = "tpurun/setting"

// Bind says, beside the flag's definition, that the flag name of fs sets the settings ss: a configuration error
// about one of them names the flag (FlagOf). A flag may set several settings (--nnodes: the job's node count and
// the rendezvous's); a name that is not a flag of fs is a mistake of the program, and panics.
func Bind(fs *pflag.FlagSet, name string, ss ...failure.Setting) {
	f := fs.Lookup(name)
	if f == nil {
		panic("cli.Bind: no flag --" + name)
	}
	bound := f.Annotations[SettingKey]
	for _, s := range ss {
		bound = append(bound, string(s))
	}
	if err := fs.SetAnnotation(name, SettingKey, bound); err != nil {
		panic(err)
	}
}

// FlagOf names the flag of fs bound to s ("--grace"), "" when none is (or fs is nil).
func FlagOf(fs *pflag.FlagSet, s failure.Setting) string {
	if fs == nil || s == "" {
		return ""
	}
	name := ""
	fs.VisitAll(func(f *pflag.Flag) {
		if name == "" && slices.Contains(f.Annotations[SettingKey], string(s)) {
			name = "--" + f.Name
		}
	})
	return name
}

// Dashes lets every flag be spelled with '_' for '-', as torchrun's (--nproc_per_node): a FlagSet's normalize
// function.
func Dashes(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
}
