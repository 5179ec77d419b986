package topology

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"tpurun/internal/setting"
)

// v4Host is one v4 host (4 chips) whose environment is env, detected without a metadata server.
func v4Host(t *testing.T, env map[string]string) *Host {
	t.Helper()
	ft := newTree(t).tpu(t, "0x005e", 4)
	h, err := Detect(context.Background(), Options{LookupEnv: envOf(env), SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: noMD(t)})
	must(t, err)
	return h
}

// TestJobLayoutIsOneWorldOverEverySlice: every host of a slice, and of every slice of a multislice job, derives the
// same world from its own environment: nodes = hosts per slice x slices, node rank = slice x hosts + worker id,
// node 0 the coordinator's host (a host:port coordinator counts by its host).
func TestJobLayoutIsOneWorldOverEverySlice(t *testing.T) {
	slice := map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a0,a1", "TPU_WORKER_ID": "1", "TPU_SKIP_MDS_QUERY": "true"}
	l, err := v4Host(t, slice).JobLayout(Request{})
	must(t, err)
	if l == nil || l.NNodes() != 2 || l.NodeRank() != 1 || l.Coordinator != "a0" || l.Self() != "a1" || l.Slices != 1 {
		t.Fatalf("one slice: %+v", l)
	}
	multi := map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "b0,b1", "TPU_WORKER_ID": "1", "TPU_SKIP_MDS_QUERY": "true",
		"MEGASCALE_NUM_SLICES": "3", "MEGASCALE_SLICE_ID": "2", "MEGASCALE_COORDINATOR_ADDRESS": "a0.js:8080"}
	l, err = v4Host(t, multi).JobLayout(Request{})
	must(t, err)
	if l.NNodes() != 6 || l.NodeRank() != 5 || l.Coordinator != "a0.js" || l.Self() != "b1" || !strings.Contains(l.String(), "slice 2 of 3") {
		t.Fatalf("multislice: %+v (%s)", l, l)
	}
	w := l.World(4, 8081)
	if len(w.Nodes) != 6 || w.NodeRank != 5 || w.Nodes[4].Addr != "b0" || w.Nodes[5].SliceID != 2 || w.Nodes[0].Addr == "a0" || w.NumSlices != 3 {
		t.Fatalf("world %+v: this slice named by its list, the others by slice and worker", w)
	}
	var b strings.Builder
	d := &Doctor{Host: v4Host(t, multi)}
	d.SetJob(d.Host.JobLayout(Request{}))
	must(t, WriteDoctor(&b, d))
	if !strings.Contains(b.String(), "job: this host is worker 1 of 2 (env TPU_WORKER_HOSTNAMES) in slice 2 of 3: node 5 of 6; a plain run meets the others at a0.js") {
		t.Fatalf("doctor does not say where the host stands in the job:\n%s", b.String())
	}
	p, err := NewPlan(v4Host(t, multi), Request{}, w)
	must(t, err)
	local := p.Local(5)
	if len(p.Workers) != 24 || len(local) != 4 || local[0].Rank != 20 {
		t.Fatalf("the job's plan: %d workers, node 5 has %d from rank %d", len(p.Workers), len(local), local[0].Rank)
	}
	if e := local[0].Env; e["MEGASCALE_COORDINATOR_ADDRESS"] != "a0.js:8080" || e["TPU_WORKER_ID"] != "1" || e["TPU_WORKER_HOSTNAMES"] != "b0,b1" ||
		e["MEGASCALE_SLICE_ID"] != "2" || e["CLOUD_TPU_TASK_ID"] != "4" {
		t.Fatalf("node 5's first worker: the coordinator as inherited, the TPU env per slice: %v", e)
	}
}

// TestJobLayoutOnlyWhereTheHostIsOneOfSeveral: a host alone in its slice, a one-chip run (xmp.spawn(nprocs=1)), and
// a host that is not a TPU describe no job to join.
func TestJobLayoutOnlyWhereTheHostIsOneOfSeveral(t *testing.T) {
	for name, tc := range map[string]struct {
		env map[string]string
		req Request
	}{
		"single-host slice":  {map[string]string{"TPU_ACCELERATOR_TYPE": "v4-8"}, Request{}},
		"listed alone":       {map[string]string{"TPU_ACCELERATOR_TYPE": "v4-8", "TPU_WORKER_HOSTNAMES": "a0", "TPU_WORKER_ID": "0"}, Request{}},
		"one chip of a pod":  {map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a0,a1", "TPU_WORKER_ID": "1"}, Request{NProcs: 1}},
		"one slice of one":   {map[string]string{"TPU_ACCELERATOR_TYPE": "v4-8", "MEGASCALE_NUM_SLICES": "1"}, Request{}},
		"no MEGASCALE slice": {map[string]string{"TPU_ACCELERATOR_TYPE": "v4-8", "MEGASCALE_SLICE_ID": "1"}, Request{}},
	} {
		l, err := v4Host(t, tc.env).JobLayout(tc.req)
		if l != nil || err != nil {
			t.Errorf("%s: layout %+v, error %v; want none", name, l, err)
		}
	}
	cpu, err := Detect(context.Background(), Options{Device: "cpu", LookupEnv: envOf(map[string]string{"TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "0"}),
		SysfsRoot: t.TempDir(), DevRoot: t.TempDir()})
	must(t, err)
	if l, err := cpu.JobLayout(Request{}); l != nil || err != nil {
		t.Errorf("a CPU host: layout %+v, error %v; want none (a batch scheduler's list does not mean every host runs tpurun)", l, err)
	}
	// two one-host slices: a job of two nodes, though no slice lists its hosts
	l, err := v4Host(t, map[string]string{"TPU_ACCELERATOR_TYPE": "v4-8", "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "1",
		"MEGASCALE_COORDINATOR_ADDRESS": "c0"}).JobLayout(Request{})
	must(t, err)
	if l == nil || l.NNodes() != 2 || l.NodeRank() != 1 || l.Self() != "" {
		t.Fatalf("two one-host slices: %+v", l)
	}
}

// TestJobLayoutRefusesWhatCannotBeMadeConsistent: each refusal names the variable that is missing or wrong, so
// every host of the job fails before anything starts instead of waiting for a coordinator nobody names.
func TestJobLayoutRefusesWhatCannotBeMadeConsistent(t *testing.T) {
	base := func(kv ...string) map[string]string {
		m := map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a0,a1", "TPU_WORKER_ID": "0"}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	for _, tc := range []struct {
		env  map[string]string
		name setting.Setting
	}{
		{base("MEGASCALE_NUM_SLICES", "2", "MEGASCALE_SLICE_ID", "1"), "MEGASCALE_COORDINATOR_ADDRESS"},
		{base("MEGASCALE_NUM_SLICES", "2", "MEGASCALE_COORDINATOR_ADDRESS", "a0"), "MEGASCALE_SLICE_ID"},
		{base("MEGASCALE_NUM_SLICES", "2", "MEGASCALE_SLICE_ID", "2", "MEGASCALE_COORDINATOR_ADDRESS", "a0"), "MEGASCALE_SLICE_ID"},
	} {
		_, err := v4Host(t, tc.env).JobLayout(Request{})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Name != tc.name || !errors.Is(err, ErrConfig) {
			t.Errorf("env %v: %v; want a *ConfigError naming %s", tc.env, err, tc.name)
		}
	}
}

// TestAloneIsAOneHostSlice: one host of a v4-16 slice run on purpose alone is planned as a v4-8 of its own: one
// node, host bounds 1,1,1, no host list, worker 0.
func TestAloneIsAOneHostSlice(t *testing.T) {
	h := v4Host(t, map[string]string{"TPU_ACCELERATOR_TYPE": "v4-16", "TPU_WORKER_HOSTNAMES": "a0,a1", "TPU_WORKER_ID": "1",
		"MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "0", "MEGASCALE_COORDINATOR_ADDRESS": "a0"}).Alone()
	if l, err := h.JobLayout(Request{}); l != nil || err != nil {
		t.Fatalf("alone, the host still describes a job: %+v %v", l, err)
	}
	p, err := NewPlan(h, Request{}, World{})
	must(t, err)
	e := p.Workers[3].Env
	if len(p.Nodes) != 1 || len(p.Workers) != 4 || e["TPU_ACCELERATOR_TYPE"] != "v4-8" || e["TPU_HOST_BOUNDS"] != "1,1,1" ||
		e["TPU_WORKER_ID"] != "0" || e["TPU_WORKER_HOSTNAMES"] != "" || e["MEGASCALE_NUM_SLICES"] != "" {
		t.Fatalf("alone: %d nodes, %d workers, rank 3's env %v", len(p.Nodes), len(p.Workers), e)
	}
	if !slices.Contains(JobEnv(), "TPU_WORKER_HOSTNAMES") || !slices.Contains(JobEnv(), "MEGASCALE_COORDINATOR_ADDRESS") {
		t.Fatalf("JobEnv %v leaves the job's variables to the workers", JobEnv())
	}
}
