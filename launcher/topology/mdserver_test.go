package topology

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// mdServer is a fake GCE metadata server that counts requests per key.
type mdServer struct {
	*httptest.Server
	mu     sync.Mutex
	counts map[string]int
}

// newMD serves answers (key -> body); a key without an answer is 404. handler, if non-nil, replaces the answers.
func newMD(t *testing.T, answers map[string]string, handler func(w http.ResponseWriter, r *http.Request)) *mdServer {
	t.Helper()
	m := &mdServer{counts: map[string]int{}}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.URL.Path, attributesPath)
		m.mu.Lock()
		m.counts[key]++
		m.mu.Unlock()
		if r.Header.Get("Metadata-Flavor") != "Google" {
			http.Error(w, "missing Metadata-Flavor", http.StatusForbidden)
			return
		}
		if handler != nil {
			handler(w, r)
			return
		}
		body, ok := answers[key]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Metadata-Flavor", "Google")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *mdServer) count(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[key]
}

func (m *mdServer) total() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, c := range m.counts {
		n += c
	}
	return n
}

// refusedURL is the address of a TCP socket that is bound but not listening: connections are refused, and the port
// stays reserved (no other test's server can take it) until the test ends.
func refusedURL(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	must(t, err)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	must(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	sa, err := syscall.Getsockname(fd)
	must(t, err)
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}
