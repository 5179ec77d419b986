package topology

import (
	"fmt"
)

// SourceKind says where a detected value came from, in precedence order: flags beat env, env beats sysfs/dev,
// sysfs/dev beat the metadata server, which beats the defaults.
type SourceKind string

// The kinds of source a Value can have.
const (
	FromFlag     SourceKind = "flag"
	FromEnv      SourceKind = "env"
	FromSysfs    SourceKind = "sysfs"
	FromDev      SourceKind = "dev"
	FromMetadata SourceKind = "metadata"
	FromDefault  SourceKind = "default"
	FromDerived  SourceKind = "derived"
)

// Source names where a value came from: the flag, the env var, the sysfs file or directory, the metadata URL, or
// "default". The zero Source means "not set".
type Source struct {
	Kind SourceKind `json:"kind"`
	Name string     `json:"name,omitempty"`
}

// String renders "env TPU_NUM_DEVICES", "flag --nprocs", "sysfs /sys/bus/pci/devices", "default".
func (s Source) String() string {
	switch {
	case s.Kind == "":
		return "unset"
	case s.Name == "":
		return string(s.Kind)
	case s.Kind == FromDerived:
		return "derived from " + s.Name
	default:
		return fmt.Sprintf("%s %s", s.Kind, s.Name)
	}
}

// IsSet reports whether the source is known, i.e. the value was given or detected.
func (s Source) IsSet() bool { return s.Kind != "" }

// Derived reports whether the value was computed from another (its String names that one).
func (s Source) Derived() bool { return s.Kind == FromDerived }

// Flag, Env, Sysfs, Dev, Metadata, Default and Derived build Sources.
func Flag(name string) Source    { return Source{Kind: FromFlag, Name: "--" + name} }
func Env(name string) Source     { return Source{Kind: FromEnv, Name: name} }
func Sysfs(path string) Source   { return Source{Kind: FromSysfs, Name: path} }
func Dev(path string) Source     { return Source{Kind: FromDev, Name: path} }
func Metadata(url string) Source { return Source{Kind: FromMetadata, Name: url} }
func Default() Source            { return Source{Kind: FromDefault} }
func Derived(from string) Source { return Source{Kind: FromDerived, Name: from} }

// DerivedFrom is the source of a value computed from another: it names the original source once, however long
// the chain of derivations ("derived from sysfs /sys/bus/pci/devices", never "derived derived ...").
func DerivedFrom(s Source) Source {
	if s.Kind == FromDerived {
		return s
	}
	return Derived(s.String())
}

// Value is one detected setting together with where it came from.
type Value[T any] struct {
	V      T      `json:"value"`
	Source Source `json:"source"`
}

// IsSet reports whether the value was given or detected (its Source is known).
func (v Value[T]) IsSet() bool { return v.Source.IsSet() }

func val[T any](v T, s Source) Value[T] { return Value[T]{V: v, Source: s} }
