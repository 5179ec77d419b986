package testutil

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Buffer is a bytes.Buffer safe for concurrent writers (a launcher's forwarders, a child's stdout and stderr) and
// for a test that reads it while they write. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Len is the number of bytes written so far.
func (s *Buffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// WaitFor waits until the buffer holds substr (a line a process printed) and returns everything written so far.
func (s *Buffer) WaitFor(t testing.TB, substr string) string {
	t.Helper()
	var all string
	WaitFor(t, fmt.Sprintf("%q to be written", substr), func() error {
		if all = s.String(); strings.Contains(all, substr) {
			return nil
		}
		return fmt.Errorf("written so far:\n%s", tail(all, 4000))
	})
	return all
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
