package console

import (
	"strings"
	"sync"
)

// tailSize is how much of a worker's stderr is kept for the root-cause report.
const tailSize = 8 << 10

// Tail keeps the last tailSize bytes written to it (a worker's stderr, for the report of its failure).
type Tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *Tail) add(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= tailSize {
		t.buf = append(t.buf[:0], p[len(p)-tailSize:]...)
		return
	}
	if over := len(t.buf) + len(p) - tailSize; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
}

// Lines returns up to n last complete-or-final lines.
func (t *Tail) Lines(n int) []string {
	t.mu.Lock()
	s := string(t.buf)
	t.mu.Unlock()
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	all := strings.Split(s, "\n")
	if len(all) > n {
		all = all[len(all)-n:]
	}
	return all
}
