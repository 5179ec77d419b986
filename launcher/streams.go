package launcher

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
	if s.PerRank != nil {
		for _, v := range s.PerRank {
			if v != StdNone {
				return true
			}
		}
		return false
	}
	return s.All != StdNone
}
