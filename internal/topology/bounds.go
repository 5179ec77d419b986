package topology

import (
	"strconv"
	"strings"
)

// Bounds is a grid such as TPU_PROCESS_BOUNDS "2,2,1": one extent per dimension.
type Bounds []int

// String renders "2,2,1".
func (b Bounds) String() string { return joinInts(b, ",") }

// Product is the number of cells of the grid.
func (b Bounds) Product() int {
	if len(b) == 0 {
		return 0
	}
	p := 1
	for _, v := range b {
		p *= v
	}
	return p
}

// Mul multiplies two grids element-wise (host bounds x chips-per-host bounds = process bounds).
func (b Bounds) Mul(o Bounds) Bounds {
	out := make(Bounds, len(b))
	for i := range b {
		out[i] = b[i]
		if i < len(o) {
			out[i] *= o[i]
		}
	}
	return out
}

// maxExtent bounds one dimension so that products cannot overflow.
const maxExtent = 4096

// ParseBounds parses "2,2,1" (3 dimensions, or 4 as torch_xla writes for generation 7): positive whole numbers.
func ParseBounds(s string) (Bounds, error) {
	parts := strings.Split(strings.TrimSpace(s), ",")
	if len(parts) != 3 && len(parts) != 4 {
		return nil, parseErrorf("bounds %q must be 3 (or 4) comma-separated positive numbers such as 2,2,1", s)
	}
	b := make(Bounds, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > maxExtent || !isDigits(strings.TrimSpace(p)) {
			return nil, parseErrorf("bounds %q: element %d (%q) is not a positive number up to %d", s, i+1, p, maxExtent)
		}
		b[i] = n
	}
	return b, nil
}

// ChipBounds is the chip grid of n chips on one host: 1 -> 1,1,1; 2 -> 1,2,1; 4 -> 2,2,1; 8 -> 2,4,1.
func ChipBounds(n int) (Bounds, error) {
	switch n {
	case 1:
		return Bounds{1, 1, 1}, nil
	case 2:
		return Bounds{1, 2, 1}, nil
	case 4:
		return Bounds{2, 2, 1}, nil
	case 8:
		return Bounds{2, 4, 1}, nil
	}
	return nil, parseErrorf("%d chips on one host has no chip grid; use 1, 2, 4 or 8", n)
}

func isDigits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
