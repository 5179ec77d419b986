package topology

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestMetadataFailures: refused, stalled, 500, 404 and garbage each end within the budget with an error that names
// the URL, the cause and the env vars that replace the query; answers and failures are fetched once per client.
func TestMetadataFailures(t *testing.T) {
	t.Parallel()
	const budget = 800 * time.Millisecond
	const slack = time.Second // the machine may be loaded; the point is seconds, not minutes
	cases := []struct {
		name       string
		handler    func(w http.ResponseWriter, r *http.Request)
		refused    bool
		status     int
		maxReq     int
		is         error
		wantInText string
	}{
		{name: "refused", refused: true, is: syscall.ECONNREFUSED, wantInText: "connection refused"},
		{name: "stalls", handler: func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, maxReq: 3, is: context.DeadlineExceeded},
		{name: "500", handler: func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) }, status: 500, maxReq: 3, wantInText: "HTTP 500"},
		{name: "404", handler: func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, status: 404, maxReq: 1, wantInText: "HTTP 404"},
		{name: "garbage", handler: func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("<html><body>captive portal</body></html>"))
		}, status: 200, maxReq: 1, is: ErrParse},
		{name: "not a metadata server", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Metadata-Flavor", "Evil")
			_, _ = w.Write([]byte("ACCELERATOR_TYPE: 'v4-8'"))
		}, status: 200, maxReq: 1, is: ErrParse},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var base string
			var md *mdServer
			if tc.refused {
				base = refusedURL(t)
			} else {
				md = newMD(t, nil, tc.handler)
				base = md.URL
			}
			c := NewMetadataClient(base, budget, nil)
			start := time.Now()
			body, err := c.Get(context.Background(), KeyTPUEnv)
			if err == nil {
				_, err = ParseTPUEnv(body)
				err = c.parsed(KeyTPUEnv, err)
			}
			el := time.Since(start)
			if el > budget+slack {
				t.Errorf("took %s with a budget of %s", el, budget)
			}
			var me *MetadataError
			if !errors.As(err, &me) || !errors.Is(err, ErrMetadata) {
				t.Fatalf("err = %v, want a MetadataError", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("err = %v, want errors.Is %v", err, tc.is)
			}
			msg := err.Error()
			for _, s := range []string{base + attributesPath + KeyTPUEnv, "TPU_SKIP_MDS_QUERY=1", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", tc.wantInText} {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q lacks %q", msg, s)
				}
			}
			if me.Status != tc.status {
				t.Errorf("status %d, want %d", me.Status, tc.status)
			}
			if md != nil {
				n := md.count(KeyTPUEnv)
				if n < 1 || n > tc.maxReq {
					t.Errorf("%d requests, want 1..%d", n, tc.maxReq)
				}
				// A second Get in the same run is answered from the cache.
				_, err2 := c.Get(context.Background(), KeyTPUEnv)
				if md.count(KeyTPUEnv) != n || (err2 == nil) != (tc.name == "garbage") {
					t.Errorf("second Get asked again (%d -> %d) or changed outcome (%v)", n, md.count(KeyTPUEnv), err2)
				}
			}
		})
	}
}

func TestMetadataGoodAnswerFetchedOnce(t *testing.T) {
	t.Parallel()
	md := newMD(t, map[string]string{KeyAcceleratorType: "v5litepod-16"}, nil)
	c := NewMetadataClient(strings.TrimPrefix(md.URL, "http://"), time.Second, nil) // GCE_METADATA_HOST style
	for i := 0; i < 3; i++ {
		b, err := c.Get(context.Background(), KeyAcceleratorType)
		if err != nil || b != "v5litepod-16" {
			t.Fatalf("Get = %q, %v", b, err)
		}
	}
	if md.count(KeyAcceleratorType) != 1 {
		t.Errorf("asked %d times", md.count(KeyAcceleratorType))
	}
	p := ProbeMetadata(context.Background(), c)
	if !p.OK || md.count(KeyAcceleratorType) != 1 {
		t.Errorf("probe %+v, count %d", p, md.count(KeyAcceleratorType))
	}
}

// TestDetectMetadataHardFailure: when nothing but the metadata server could describe the slice, its failure is the
// error, in bounded time; GCE_METADATA_HOST is honoured.
func TestDetectMetadataHardFailure(t *testing.T) {
	t.Parallel()
	ft := newTree(t) // no chips visible: a container that hides /sys and /dev
	md := newMD(t, nil, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	})
	env := map[string]string{"GCE_METADATA_HOST": strings.TrimPrefix(md.URL, "http://")}
	start := time.Now()
	_, err := Detect(context.Background(), Options{Device: "tpu", LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataBudget: time.Second}, nil)
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("took %s", el)
	}
	if !errors.Is(err, ErrMetadata) || !strings.Contains(err.Error(), md.URL) || !strings.Contains(err.Error(), "HTTP 503") {
		t.Fatalf("err = %v", err)
	}
	if n := md.count(KeyTPUEnv); n < 2 || n > 3 {
		t.Errorf("tpu-env asked %d times, want retries (2..3)", n)
	}
	if md.total() != md.count(KeyTPUEnv) {
		t.Errorf("other keys asked after tpu-env failed: %v", md.counts)
	}
}

func TestDetectChipsHiddenButEnvDescribes(t *testing.T) {
	t.Parallel()
	ft := newTree(t)
	md := newMD(t, nil, nil)
	h, err := Detect(context.Background(), Options{Device: "tpu", LookupEnv: envOf(map[string]string{"TPU_ACCELERATOR_TYPE": "v6e-8"}), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: md.URL}, nil)
	must(t, err)
	if len(h.tpu().Chips) != 8 || h.tpu().ChipsSource.Kind != FromDerived || md.total() != 0 {
		t.Fatalf("chips %d from %s, %d metadata requests", len(h.tpu().Chips), h.tpu().ChipsSource, md.total())
	}
}

// TestMetadataIgnoresProxy: HTTP_PROXY and HTTPS_PROXY (common in containers) must not route metadata queries
// through a proxy, which cannot reach the metadata server. net/http reads the proxy variables once per process, so
// the query runs in a fresh copy of the test binary whose environment names a proxy that records connections. The
// metadata server is addressed as 0.0.0.0 (the local host, but not a loopback address, which net/http would exempt
// from the proxy by itself).
func TestMetadataIgnoresProxy(t *testing.T) {
	t.Parallel()
	md := newMD(t, map[string]string{KeyTPUEnv: "ACCELERATOR_TYPE: 'v4-8'\n"}, nil)
	_, mdPort, err := net.SplitHostPort(md.Listener.Addr().String())
	must(t, err)

	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	var proxied atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := proxy.Accept()
			if err != nil {
				return
			}
			proxied.Add(1) // counted before the close that the client would wait for
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = proxy.Close()
		<-done
	})

	ft := newTree(t)
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch u := strings.ToUpper(k); {
		case strings.HasSuffix(u, "_PROXY"), strings.HasPrefix(u, "TPU"), strings.HasPrefix(u, "PJRT_"), strings.HasPrefix(u, "XLA_"),
			strings.HasPrefix(u, "MEGASCALE_"), u == "JOB_COMPLETION_INDEX", u == "GCE_METADATA_HOST", u == "REQUEST_METHOD":
			continue
		}
		env = append(env, kv)
	}
	proxyURL := "http://" + proxy.Addr().String()
	env = append(env, "TOPOLOGY_TEST_DETECT=1", "HTTP_PROXY="+proxyURL, "http_proxy="+proxyURL, "HTTPS_PROXY="+proxyURL,
		"https_proxy="+proxyURL, "ALL_PROXY="+proxyURL, "NO_PROXY=", "no_proxy=",
		"GCE_METADATA_HOST=0.0.0.0:"+mdPort, "TPURUN_SYSFS_ROOT="+ft.sys, "TPURUN_DEV_ROOT="+ft.dev)
	exe, err := os.Executable()
	must(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if n := proxied.Load(); n != 0 {
		t.Fatalf("%d metadata connection(s) went to the proxy named by HTTP_PROXY; detect said: %s", n, out)
	}
	if err != nil || !strings.Contains(string(out), "accelerator v4-8") {
		t.Fatalf("detect with a proxy set: %v\n%s", err, out)
	}
	if md.count(KeyTPUEnv) != 1 {
		t.Errorf("the metadata server was asked %d times for %s, want once", md.count(KeyTPUEnv), KeyTPUEnv)
	}
}

// TestMetadataNoWaitAfterLastAttempt: the client waits between attempts, never after the last one (a refused
// server cost a needless 400 ms on every single-host start that asks it).
func TestMetadataNoWaitAfterLastAttempt(t *testing.T) {
	t.Parallel()
	m := NewMetadataClient(refusedURL(t), 10*time.Second, nil)
	m.attempts, m.backoff = 2, time.Second // waits 1 s between the two attempts; the old loop then waited 2 s more
	start := time.Now()
	_, err := m.Get(context.Background(), KeyTPUEnv)
	var me *MetadataError
	if !errors.As(err, &me) || me.Attempts != 2 {
		t.Fatalf("err = %v, want a *MetadataError after 2 attempts", err)
	}
	if el := time.Since(start); el >= 2*time.Second {
		t.Errorf("Get took %s: it waited after the last attempt", el)
	}
}
