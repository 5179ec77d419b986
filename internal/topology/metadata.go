package topology

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Metadata keys under instance/attributes/ that describe a TPU VM.
const (
	KeyTPUEnv           = "tpu-env"
	KeyEndpoints        = "worker-network-endpoints"
	KeyWorkerNumber     = "agent-worker-number"
	KeyAcceleratorType  = "accelerator-type"
	defaultMetadataBase = "http://metadata.google.internal"
	attributesPath      = "/computeMetadata/v1/instance/attributes/"
	maxMetadataBody     = 1 << 20
)

// Defaults of the metadata client.
const (
	DefaultMetadataBudget  = 3 * time.Second
	defaultRequestTimeout  = time.Second
	defaultAttempts        = 3
	defaultMetadataBackoff = 100 * time.Millisecond
)

// MetadataClient asks the GCE metadata server for instance attributes: a per-request timeout, retries with
// backoff on refused/timeout/5xx, a total budget shared by every key, each key fetched at most once.
type MetadataClient struct {
	base     string
	http     *http.Client
	attempts int
	backoff  time.Duration
	deadline time.Time
	log      *zap.Logger

	mu    sync.Mutex
	cache map[string]metadataAnswer
}

type metadataAnswer struct {
	body string
	err  error
}

// NewMetadataClient builds a client for base (a bare "host:port", as in GCE_METADATA_HOST, gets http://) whose
// queries all end within budget from now. It uses no proxy (a container's HTTP_PROXY cannot reach the VM's own
// link, and the queries would stall until the budget ends) and no keep-alive (nothing outlives one Detect).
func NewMetadataClient(base string, budget time.Duration, log *zap.Logger) *MetadataClient {
	if base = cmp.Or(base, defaultMetadataBase); !strings.Contains(base, "://") {
		base = "http://" + base
	}
	if budget <= 0 {
		budget = DefaultMetadataBudget
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: min(defaultRequestTimeout, budget)}
	return &MetadataClient{
		base: strings.TrimRight(base, "/"), http: hc, attempts: defaultAttempts, backoff: defaultMetadataBackoff,
		deadline: time.Now().Add(budget), log: cmp.Or(log, zap.NewNop()), cache: map[string]metadataAnswer{},
	}
}

// URL is the address of an attribute key.
func (m *MetadataClient) URL(key string) string { return m.base + attributesPath + key }

// Get returns the attribute key's body, or a *MetadataError; the first answer (or failure) for a key is cached.
func (m *MetadataClient) Get(ctx context.Context, key string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock() // one query at a time: Detect asks sequentially, and this keeps "at most once" simple
	if a, ok := m.cache[key]; ok {
		return a.body, a.err
	}
	body, err := m.fetch(ctx, key)
	m.cache[key] = metadataAnswer{body, err}
	return body, err
}

func (m *MetadataClient) fetch(ctx context.Context, key string) (string, error) {
	url := m.URL(key)
	ctx, cancel := context.WithDeadline(ctx, m.deadline)
	defer cancel()
	var last error
	status, backoff, attempt := 0, m.backoff, 0
retry:
	for attempt < m.attempts {
		attempt++
		start := time.Now()
		body, st, err := m.once(ctx, url)
		m.log.Debug("metadata query", zap.String("url", url), zap.Int("attempt", attempt), zap.Int("status", st),
			zap.Duration("elapsed", time.Since(start)), zap.Error(err))
		if err == nil {
			return body, nil
		}
		if st == 0 && last != nil && ctx.Err() != nil {
			// The budget ran out during a retry: keep what the earlier attempts learnt (status, refusal).
			err, st = fmt.Errorf("budget exhausted (%w) after: %w", ctx.Err(), last), status
		}
		status, last = st, err
		if !retryable(st, err) || ctx.Err() != nil || attempt == m.attempts {
			break // no wait after the last attempt
		}
		select {
		case <-ctx.Done():
			break retry
		case <-time.After(backoff):
		}
		backoff *= 2
	}
	return "", &MetadataError{URL: url, Status: status, Attempts: attempt, Err: last}
}

func retryable(status int, err error) bool {
	if errors.Is(err, ErrParse) {
		return false
	}
	if status == 0 {
		return true // refused, reset, per-request timeout
	}
	return status >= 500 || status == http.StatusTooManyRequests
}

func (m *MetadataClient) once(ctx context.Context, url string) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Metadata-Flavor", "Google")
	resp, err := m.http.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadataBody+1))
	if err != nil {
		return "", resp.StatusCode, fmt.Errorf("read body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", resp.StatusCode, fmt.Errorf("unexpected HTTP status %s", resp.Status)
	}
	if len(b) > maxMetadataBody {
		return "", resp.StatusCode, parseErrorf("body larger than %d bytes", maxMetadataBody)
	}
	if f := resp.Header.Get("Metadata-Flavor"); f != "" && f != "Google" {
		return "", resp.StatusCode, parseErrorf("answer has Metadata-Flavor %q, not Google: not a metadata server", f)
	}
	return string(b), resp.StatusCode, nil
}

// parsed wraps a parse failure of a fetched body as a *MetadataError so that it names the URL and the remedy.
func (m *MetadataClient) parsed(key string, err error) error {
	if err == nil {
		return nil
	}
	return &MetadataError{URL: m.URL(key), Status: http.StatusOK, Attempts: 1, Err: err}
}

// Probe is the result of a reachability check of the metadata server, for tpurun doctor.
type Probe struct {
	URL     string        `json:"url"`
	OK      bool          `json:"ok"`
	Elapsed time.Duration `json:"elapsed_ns"`
	Err     string        `json:"error,omitempty"`
}

// ProbeMetadata asks for accelerator-type once (with the client's retries and budget) and reports how long it took.
func ProbeMetadata(ctx context.Context, m *MetadataClient) Probe {
	start := time.Now()
	_, err := m.Get(ctx, KeyAcceleratorType)
	p := Probe{URL: m.URL(KeyAcceleratorType), OK: err == nil, Elapsed: time.Since(start)}
	if err != nil {
		p.Err = err.Error()
	}
	return p
}
