package failure

import (
	"fmt"
	"strings"
)

// ConfigError is the configuration error of every layer: the setting that is wrong, its value and what to do about
// it; errors.Is(err, ErrConfig) holds (exit 2), and so does errors.Is(err, Kind) for a layer's own sentinel. Its
// message is `SETTING="VALUE": HINT`; with a Problem (a host's detected setting, topology's), it is
// `SETTING VALUE PROBLEM (from SOURCES): ERR; use CHOICES, HINT`, each part only when set.
type ConfigError struct {
	Field   Setting  // the setting, e.g. Grace, MasterPort ("MASTER_PORT") or Named("TPU_NUM_DEVICES")
	Value   string   // the offending value as given
	Problem string   // what is wrong, e.g. "is not a valid split of the 8 v5e chips on this host"
	Sources []Source // where the conflicting facts came from
	Choices []string // the valid choices, if a finite list
	Hint    string   // what to do, e.g. "or leave it unset"
	Err     error    // the underlying cause, if any
	Kind    error    // the layer's sentinel the error also matches (NewConfigKind), if any
}

// Source is where a value came from, as a message names it ("env TPU_NUM_DEVICES"). A Derived one names its own
// origin ("derived from flag --nprocs").
type Source interface {
	String() string
	Derived() bool
}

func (e *ConfigError) Error() string {
	if e.Problem == "" {
		return fmt.Sprintf("%s=%q: %s", e.Field, e.Value, e.Hint)
	}
	var b strings.Builder
	b.WriteString(string(e.Field))
	if e.Value != "" {
		b.WriteString(" " + e.Value)
	}
	b.WriteString(" " + e.Problem)
	if len(e.Sources) > 0 {
		b.WriteString(" (" + sourceList(e.Sources) + ")")
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	sep := "; "
	if len(e.Choices) > 0 {
		b.WriteString("; use " + orList(e.Choices))
		sep = ", "
	}
	if e.Hint != "" {
		b.WriteString(sep + e.Hint)
	}
	return b.String()
}

// Setting is the setting the error is about (Field).
func (e *ConfigError) Setting() Setting { return e.Field }

// Unwrap makes errors.Is(err, ErrConfig) and errors.Is(err, Kind) true, and exposes the cause.
func (e *ConfigError) Unwrap() []error {
	errs := []error{ErrConfig}
	for _, err := range []error{e.Kind, e.Err} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// sourceList renders sources for a message: "from flag --nprocs, env TPU_NUM_DEVICES". The derived ones name
// themselves, so they follow the others after a semicolon rather than read "from derived from ...". A source listed
// twice is named once.
func sourceList(sources []Source) string {
	var given, derived []string
	seen := map[string]bool{}
	for _, s := range sources {
		if seen[s.String()] {
			continue
		}
		seen[s.String()] = true
		if s.Derived() {
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

// orList renders "1", "1 or 2", "1, 2, 4 or 8".
func orList(items []string) string {
	if len(items) == 1 {
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}
