// Package cli owns tpurun's command line below cmd/tpurun's main: it reads a command line the way torchrun's
// argparse reads it (a long flag may be shortened to any unique prefix of one of torchrun's flags, '_' spells '-',
// every flag not given takes its value from torchrun's PET_<FLAG> variable, a duration may be given in torchrun's
// plain seconds, a mistyped flag gets the nearest flag as a suggestion: Expand before parsing, ApplyPET after);
// it registers the flags that tpurun's commands share (run, plan and doctor) — which devices to use and how to
// split them, in tpurun's and torchrun's spellings — and turns them into what detection and planning take
// (topology.Options, topology.Request); and it parses the values of the other flags (the Python command line,
// node counts, stream selectors, rank lists, signal and module lists) into what a launcher.Spec takes. Each flag
// that sets a setting (internal/setting) is bound to it where the flag is defined (Bind), so that an error about
// the setting names the flag (FlagOf). A run leaves detection to the launcher (once per run); DetectPlan detects
// for `tpurun plan`.
package cli
