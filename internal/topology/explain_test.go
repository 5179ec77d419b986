package topology

import (
	"context"
	"strings"
	"testing"
)

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
		req  Request
		want []string
		not  []string
	}{
		{name: "process per chip", id: "0x0063", n: 8, req: Request{},
			want: []string{"TPU_PROCESS_ADDRESSES name localhost", "JAX: jax.distributed.initialize() detects a cloud-TPU cluster from TPU_PROCESS_ADDRESSES and takes TPU_WORKER_ID (the host index) as the process id, which repeats with 8 processes per host: pass process_id=int(os.environ['JAX_PROCESS_ID']), num_processes=int(os.environ['JAX_NUM_PROCESSES'])"}},
		{name: "spmd", id: "0x0063", n: 8, req: Request{SPMD: true},
			want: []string{"SPMD: one process per host sees chips 0,1,2,3,4,5,6,7"}, not: []string{"JAX:"}},
		{name: "spmd on several hosts", id: "0x005e", n: 4, env: map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "1"},
			req: Request{SPMD: true}, want: []string{"JAX: jax.distributed.initialize() needs no arguments here"}},
		{name: "one chip of a multi-host slice", id: "0x005e", n: 4, env: map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "1"},
			req: Request{NProcs: 1}, want: []string{"nprocs 1 is xmp.spawn(nprocs=1)'s one-chip run: one process on chip 0", "keeping host 1 of the 2-host slice"}},
		{name: "TPU_PROCESS_BOUNDS gives the count", id: "0x0063", n: 8, env: map[string]string{"TPU_PROCESS_BOUNDS": "2,2,1"},
			want: []string{"TPU_PROCESS_BOUNDS=2,2,1 (env TPU_PROCESS_BOUNDS) runs 4 processes on this host"}},
		{name: "tpu7x from env", id: "0x0076", n: 4, env: map[string]string{"TPU_ACCELERATOR_TYPE": "tpu7x-8"},
			want: []string{"TPU_PROCESS_BOUNDS=2,2,1 has three numbers on tpu7x", "unverified"}},
		{name: "tpu7x from metadata", id: "0x0076", n: 4, md: map[string]string{KeyTPUEnv: tpuEnvBody("tpu7x-8", 0)},
			want: []string{"TPU_PROCESS_BOUNDS=2,2,1,2 carries tpu7x's core dimension as xmp.spawn writes it"}},
		{name: "host-name endpoints", id: "0x005e", n: 4, md: map[string]string{KeyTPUEnv: tpuEnvBody("v4-16", 0), KeyEndpoints: "w-0,w-1"},
			want: []string{"worker-network-endpoints lists host names only", "because torch_xla cannot read the metadata server's host list"}},
		{name: "no plan, no notes", id: "0x0063", n: 8, req: Request{NProcs: 3}, not: []string{"TPU", "JAX"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ft := newTree(t).tpu(t, tc.id, tc.n)
			h, err := Detect(context.Background(), Options{LookupEnv: envOf(tc.env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: newMD(t, tc.md, nil).URL}, nil)
			must(t, err)
			notes := strings.Join(Explain(h, tc.req), "\n")
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
