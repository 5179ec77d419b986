package topology

import (
	"fmt"
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

// noMD is the address of a metadata server that answers 404 to every key: not a TPU VM's, and no retries.
func noMD(t *testing.T) string {
	t.Helper()
	return newMD(t, nil, nil).URL
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

// tpuEnvBody is the tpu-env a GCE TPU VM of accelerator type accel serves on host worker, shaped like the fixture
// of torch_xla's test/pjrt/test_internal_tpu.py (test_tpu_env_from_gce_metadata): TPU_PROCESS_BOUNDS is the host
// grid and TPU_CHIPS_PER_PROCESS_BOUNDS the chip grid of a host (one process per host). v2 and v3 carry no bounds
// (torch_xla's configure_topology: "TODO: merge with TPU v4 case when bounds are added to metadata").
func tpuEnvBody(accel string, worker int) string {
	a, err := ParseAcceleratorType(accel)
	if err != nil {
		panic(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ACCELERATOR_TYPE: '%s'\n", a.Type)
	if a.Family.Version >= 4 {
		fmt.Fprintf(&b, "CHIPS_PER_HOST_BOUNDS: '%s'\nHOST_BOUNDS: '%s'\n", a.ChipsPerHostBounds(), a.HostBounds())
		fmt.Fprintf(&b, "TPU_CHIPS_PER_PROCESS_BOUNDS: '%s'\nTPU_PROCESS_BOUNDS: '%s'\n", a.ChipsPerHostBounds(), a.HostBounds())
	}
	fmt.Fprintf(&b, "ZONE: 'us-central2-b'\nWORKER_ID: '%d'\n", worker)
	return b.String()
}
