package attempt

import (
	"context"
	"os"
	"os/exec"
	"runtime/debug"
	"testing"
)

// TestSamplerHoldsNoDescriptors: sampling a live worker opens nothing that outlives the sample. (gopsutil's
// NewProcess calls os.FindProcess, which holds a pidfd until the garbage collector finalizes it: one descriptor
// per worker per interval, thousands within an hour on a host of many workers.) The collector is off during the
// samples, so a descriptor left to a finalizer stays counted.
func TestSamplerHoldsNoDescriptors(t *testing.T) {
	cmd := exec.Command("sleep", "3600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	fds := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	s := NewSampler(1, nil)
	s.add(cmd.Process.Pid, 0)
	before := fds()
	const samples = 200
	for range samples {
		s.once(context.Background())
	}
	if n := fds() - before; n > 0 {
		t.Errorf("%d samples left %d more open descriptors, want none", samples, n)
	}
	smp := s.remove(cmd.Process.Pid)
	if smp.RSS == 0 || smp.PeakRSS < smp.RSS || smp.At.IsZero() {
		t.Errorf("the sample of a live process is %+v, want its RSS", smp)
	}
}
