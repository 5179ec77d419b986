package console

// Std selects standard streams, with torchrun's numbers: 0 none, 1 stdout, 2 stderr, 3 both.
type Std int

// The values of Std.
const (
	StdNone Std = 0
	StdOut  Std = 1
	StdErr  Std = 2
	StdAll  Std = 3
)

// StdSpec is a --redirects or --tee value: one Std for every local rank, or a per-local-rank map
// ("0:1,1:2"; ranks not listed get StdNone).
type StdSpec struct {
	All     Std
	PerRank map[int]Std
}

// For returns the streams selected for localRank.
func (s StdSpec) For(localRank int) Std {
	if s.PerRank != nil {
		return s.PerRank[localRank]
	}
	return s.All
}

// Any reports whether some rank selects some stream.
func (s StdSpec) Any() bool {
	for _, v := range s.PerRank {
		if v != StdNone {
			return true
		}
	}
	return s.PerRank == nil && s.All != StdNone
}

// StdinMode says which workers read tpurun's stdin (Spec.Stdin); the others read /dev/null.
type StdinMode string

// The stdin modes (--stdin).
const (
	StdinAll   StdinMode = "all"  // every worker, as torchrun's workers inherit its stdin (the default)
	StdinFirst StdinMode = "0"    // local rank 0 only
	StdinNone  StdinMode = "none" // no worker: /dev/null for all
)
