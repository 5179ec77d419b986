package hostview

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"tpurun/internal/testutil"
	"tpurun/internal/topology"
)

// metadataServer serves answers (key -> body) as a GCE metadata server; a key without an answer is 404.
func metadataServer(t *testing.T, answers map[string]string) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := answers[strings.TrimPrefix(r.URL.Path, "/computeMetadata/v1/instance/attributes/")]
		if !ok || r.Header.Get("Metadata-Flavor") != "Google" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Metadata-Flavor", "Google")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// tpuEnv is the tpu-env a GCE TPU VM of accelerator type accel serves on host worker (bounds from v4 on).
func tpuEnv(t *testing.T, accel string, worker int) string {
	a, err := topology.ParseAcceleratorType(accel)
	must(t, err)
	var b strings.Builder
	fmt.Fprintf(&b, "ACCELERATOR_TYPE: '%s'\n", a.Type)
	if a.Family.Version >= 4 {
		fmt.Fprintf(&b, "CHIPS_PER_HOST_BOUNDS: '%s'\nHOST_BOUNDS: '%s'\n", a.ChipsPerHostBounds(), a.HostBounds())
		fmt.Fprintf(&b, "TPU_CHIPS_PER_PROCESS_BOUNDS: '%s'\nTPU_PROCESS_BOUNDS: '%s'\n", a.ChipsPerHostBounds(), a.HostBounds())
	}
	fmt.Fprintf(&b, "ZONE: 'us-central2-b'\nWORKER_ID: '%d'\n", worker)
	return b.String()
}

// tpuHost is a detected TPU host of n chips of PCI id id, with env and a metadata server that answers md.
func tpuHost(t *testing.T, id string, n int, env, md map[string]string) *topology.Host {
	t.Helper()
	d := testutil.TPUFunctions
	d.Device = id
	if id == "0x0027" || id == "0x005e" { // v3, v4: /dev/accelN
		d.Node = "accel%d"
	}
	sys, dev := testutil.FakePCIHost(t, d, n)
	h, err := topology.Detect(context.Background(), topology.Options{LookupEnv: envOf(env), SysfsRoot: sys, DevRoot: dev,
		MetadataURL: metadataServer(t, md)}, nil)
	must(t, err)
	return h
}

// envOf turns a map into a LookupEnv.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// TestExplainTPU: doctor's notes say, for each choice of docs/TOPOLOGY.md that applies, what the workers get and
// why; a request that does not plan gets none.
func TestExplainTPU(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		id   string
		n    int
		env  map[string]string
		md   map[string]string
		req  topology.Request
		want []string
		not  []string
	}{
		{name: "process per chip", id: "0x0063", n: 8, req: topology.Request{},
			want: []string{"TPU_PROCESS_ADDRESSES name localhost", "JAX: jax.distributed.initialize() detects a cloud-TPU cluster from TPU_PROCESS_ADDRESSES and takes TPU_WORKER_ID (the host index) as the process id, which repeats with 8 processes per host: pass process_id=int(os.environ['JAX_PROCESS_ID']), num_processes=int(os.environ['JAX_NUM_PROCESSES'])"}},
		{name: "spmd", id: "0x0063", n: 8, req: topology.Request{SPMD: true},
			want: []string{"SPMD: one process per host sees chips 0,1,2,3,4,5,6,7"}, not: []string{"JAX:"}},
		{name: "spmd on several hosts", id: "0x005e", n: 4, env: map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "1"},
			req: topology.Request{SPMD: true}, want: []string{"JAX: jax.distributed.initialize() needs no arguments here"}},
		{name: "one chip of a multi-host slice", id: "0x005e", n: 4, env: map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "1"},
			req: topology.Request{NProcs: 1}, want: []string{"nprocs 1 is xmp.spawn(nprocs=1)'s one-chip run: one process on chip 0", "keeping host 1 of the 2-host slice"}},
		{name: "TPU_PROCESS_BOUNDS gives the count", id: "0x0063", n: 8, env: map[string]string{"TPU_PROCESS_BOUNDS": "2,2,1"},
			want: []string{"TPU_PROCESS_BOUNDS=2,2,1 (env TPU_PROCESS_BOUNDS) runs 4 processes on this host"}},
		{name: "tpu7x from env", id: "0x0076", n: 4, env: map[string]string{"TPU_ACCELERATOR_TYPE": "tpu7x-8"},
			want: []string{"TPU_PROCESS_BOUNDS=2,2,1 has three numbers on tpu7x", "unverified"}},
		{name: "tpu7x from metadata", id: "0x0076", n: 4, md: map[string]string{topology.KeyTPUEnv: tpuEnv(t, "tpu7x-8", 0)},
			want: []string{"TPU_PROCESS_BOUNDS=2,2,1,2 carries tpu7x's core dimension as xmp.spawn writes it"}},
		{name: "host-name endpoints", id: "0x005e", n: 4, md: map[string]string{topology.KeyTPUEnv: tpuEnv(t, "v4-16", 0), topology.KeyEndpoints: "w-0,w-1"},
			want: []string{"worker-network-endpoints lists host names only", "because torch_xla cannot read the metadata server's host list"}},
		{name: "no plan, no notes", id: "0x0063", n: 8, req: topology.Request{NProcs: 3}, not: []string{"TPU", "JAX"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			notes := strings.Join(Explain(tpuHost(t, tc.id, tc.n, tc.env, tc.md), tc.req), "\n")
			for _, s := range tc.want {
				if !strings.Contains(notes, s) {
					t.Errorf("notes lack %q:\n%s", s, notes)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(notes, s) {
					t.Errorf("notes have %q:\n%s", s, notes)
				}
			}
		})
	}
}

// TestExplainWorkerMetadata: the notes say where torch_xla in a worker reads the slice (the parent's
// TPU_SKIP_MDS_QUERY, the metadata server, or env) and, when tpurun hands it the slice in env, why.
func TestExplainWorkerMetadata(t *testing.T) {
	t.Parallel()
	slice := map[string]string{topology.KeyTPUEnv: tpuEnv(t, "v4-16", 1), topology.KeyWorkerNumber: "1",
		topology.KeyEndpoints: "t1v-n-w-0:8470:10.130.0.2,t1v-n-w-1:8470:10.130.0.3"}
	cases := []struct {
		name    string
		id      string
		env, md map[string]string
		req     topology.Request
		want    string
	}{
		{name: "parent true", id: "0x0063", env: map[string]string{"TPU_SKIP_MDS_QUERY": "true"},
			want: "workers keep TPU_SKIP_MDS_QUERY=true (env TPU_SKIP_MDS_QUERY)"},
		{name: "complete metadata", id: "0x005e", md: map[string]string{topology.KeyTPUEnv: tpuEnv(t, "v4-8", 0)},
			want: "torch_xla reads the slice from the metadata server, as tpurun did and as in xmp.spawn's children, so its host_index() is this host's WORKER_ID (0)"},
		{name: "metadata without WORKER_ID", id: "0x005e",
			md:   map[string]string{topology.KeyTPUEnv: "ACCELERATOR_TYPE: 'v4-8'\nTPU_PROCESS_BOUNDS: '1,1,1'\nTPU_CHIPS_PER_PROCESS_BOUNDS: '2,2,1'\n"},
			want: "the metadata server lacks values torch_xla reads"},
		{name: "metadata 404 on v4-8", id: "0x005e", md: map[string]string{}, want: "because the metadata server failed (GCE metadata "},
		{name: "metadata 404 on v3-8", id: "0x0027", md: map[string]string{}, want: "the accelerator type is unknown (v2 and v3 chips share PCI id 0x0027"},
		{name: "v3-8 named by env", id: "0x0027", env: map[string]string{"TPU_ACCELERATOR_TYPE": "v3-8"},
			want: "because tpurun planned it from env TPU_ACCELERATOR_TYPE"},
		{name: "a rendezvous in another order", id: "0x005e", md: slice, req: topology.Request{Hosts: []string{"10.130.0.3", "10.130.0.2"}},
			want: "the rendezvous agreed on hosts or a node order other than the metadata server's"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := tpuHost(t, tc.id, 4, tc.env, tc.md)
			if notes := strings.Join(Explain(h, tc.req), "\n"); !strings.Contains(notes, tc.want) {
				t.Errorf("Explain lacks %q:\n%s", tc.want, notes)
			}
		})
	}
}

// TestExplainGPU: workers see every usable GPU as under torchrun unless isolated, and JAX needs its ids from env.
func TestExplainGPU(t *testing.T) {
	t.Parallel()
	sys, dev := testutil.FakePCIHost(t, testutil.H100Functions, 4)
	for _, tc := range []struct {
		cvd  string
		req  topology.Request
		want string
	}{
		{want: "workers see every GPU, as under torchrun, and each uses cuda:LOCAL_RANK"},
		{cvd: "2,3", want: "workers see GPUs 2,3 (the parent's CUDA_VISIBLE_DEVICES), as under torchrun"},
		{req: topology.Request{IsolateGPUs: true}, want: "each worker sees only its own GPU"},
	} {
		env := map[string]string{}
		if tc.cvd != "" {
			env["CUDA_VISIBLE_DEVICES"] = tc.cvd
		}
		h, err := topology.Detect(context.Background(), topology.Options{Device: "gpu", LookupEnv: envOf(env), SysfsRoot: sys, DevRoot: dev}, nil)
		must(t, err)
		notes := strings.Join(Explain(h, tc.req), "\n")
		for _, want := range []string{tc.want, "JAX: jax.distributed.initialize() reads JAX_COORDINATOR_ADDRESS and JAX_LOCAL_DEVICE_IDS"} {
			if !strings.Contains(notes, want) {
				t.Errorf("CUDA_VISIBLE_DEVICES %q, %+v: Explain lacks %q:\n%s", tc.cvd, tc.req, want, notes)
			}
		}
	}
}

// TestExplainCPU: a CPU host's workers get JAX's coordinator but no process id or count.
func TestExplainCPU(t *testing.T) {
	t.Parallel()
	if notes := Explain(cpuHost(t), topology.Request{}); len(notes) != 1 || !strings.Contains(notes[0], "from env but no process id or count") {
		t.Errorf("notes %q", notes)
	}
}
