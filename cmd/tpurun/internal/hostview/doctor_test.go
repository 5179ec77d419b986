package hostview

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"tpurun/internal/topology"
)

// cpuHost is a detected CPU host over empty OS roots.
func cpuHost(t *testing.T) *topology.Host {
	t.Helper()
	h, err := topology.Detect(context.Background(), topology.Options{Device: "cpu", LookupEnv: func(string) (string, bool) { return "", false },
		SysfsRoot: t.TempDir(), DevRoot: t.TempDir(), ProcRoot: t.TempDir()}, nil)
	must(t, err)
	return h
}

// TestDoctorReport: the report says each setting with its source, where the host stands in the job its
// environment describes, the lockfile's holder, the metadata server's answer, the problems and the notes; its JSON
// keeps the facts.
func TestDoctorReport(t *testing.T) {
	t.Parallel()
	d := &Doctor{Host: cpuHost(t), Lock: topology.LockState{Path: "/tmp/libtpu_lockfile", Exists: true, Held: true, PID: 42, Command: "python3 train.py"},
		Metadata: &topology.Probe{URL: "http://md/accelerator-type", Elapsed: 3 * time.Second, Err: "timeout"},
		Problems: []string{"cannot read /proc"}, Notes: []string{"a note"}}
	d.SetJob(&topology.JobLayout{Hosts: []string{"b0", "b1"}, HostsSource: topology.Env("TPU_WORKER_HOSTNAMES"), WorkerID: 1, Slices: 3,
		SliceID: 2, Coordinator: "a0.js"}, nil)
	var b strings.Builder
	must(t, WriteDoctor(&b, d))
	for _, want := range []string{"device", "cpu", "job: this host is worker 1 of 2 (env TPU_WORKER_HOSTNAMES) in slice 2 of 3: node 5 of 6; a plain run meets the others at a0.js",
		"lockfile /tmp/libtpu_lockfile: HELD by pid 42 (python3 train.py)", "metadata http://md/accelerator-type: UNREACHABLE after 3s: timeout",
		"problem: cannot read /proc", "note: a note"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("doctor lacks %q:\n%s", want, b.String())
		}
	}
	js, err := json.Marshal(d)
	if err != nil || !strings.Contains(string(js), `"pid":42`) || !strings.Contains(string(js), `"coordinator":"a0.js"`) {
		t.Errorf("doctor json %s: %v", js, err)
	}
	d.SetJob(nil, errJob)
	b.Reset()
	must(t, WriteDoctor(&b, d))
	if !strings.Contains(b.String(), "job: a run would exit 2: "+errJob.Error()) {
		t.Errorf("doctor does not say why the job cannot be laid out:\n%s", b.String())
	}
}

var errJob = errors.New("TPU_WORKER_ID 7 is not below the 2 hosts of TPU_WORKER_HOSTNAMES")

// TestHeldBy names every holder of a device node, or a dash.
func TestHeldBy(t *testing.T) {
	t.Parallel()
	hs := []topology.Holder{{PID: 1, Command: "a", Path: "/dev/accel0"}, {PID: 2, Command: "b", Path: "/dev/accel0"}, {PID: 3, Command: "c", Path: "/dev/accel1"}}
	if got := heldBy(hs, "/dev/accel0"); got != "pid 1 (a), pid 2 (b)" {
		t.Errorf("heldBy accel0 = %q", got)
	}
	if got := heldBy(hs, "/dev/accel2"); got != "-" {
		t.Errorf("heldBy accel2 = %q", got)
	}
}
