package proc_test

import (
	"fmt"
	"os/exec"
	"sync/atomic"
	"testing"

	"tpurun/internal/proc"
	"tpurun/internal/testutil"
)

func init() {
	testutil.Define(testutil.Verb{Name: "release-race-main", Run: func(*testutil.Worker) int { return okOr(releaseRaceMain()) }})
}

// TestReleaseWhileTheExitIsDelivered: held children released at once, while their exits are being delivered by the
// reaper's epoll loop, each deliver their exit once and are reaped once. The loop found a child held (not yet
// released), let go of the reaper's lock and then delivered the exit; Release meanwhile reaped it and delivered it
// too: exited was closed twice (a panic; a data race under -race), onExit ran twice.
func TestReleaseWhileTheExitIsDelivered(t *testing.T) { runMain(t, "release-race-main") }

func releaseRaceMain() error {
	rp := proc.NewReaper(nil)
	var calls [20][50]atomic.Int32
	for round := range calls {
		ps := make([]*proc.Process, len(calls[round]))
		for i := range ps {
			p, err := proc.StartHeld(rp, exec.Command("/bin/true"), func(*proc.Process) { calls[round][i].Add(1) })
			if err != nil {
				rp.Close()
				return err
			}
			ps[i] = p
		}
		for i, p := range ps {
			if ex := p.Release(); ex.ExitCode != 0 {
				rp.Close()
				return fmt.Errorf("child %d: %+v", i, ex)
			}
		}
	}
	rp.Close() // its loops have ended: every delivery under way is done (onExit may run after Release returned)
	for round := range calls {
		for i := range calls[round] {
			if n := calls[round][i].Load(); n != 1 {
				return fmt.Errorf("round %d, child %d: onExit ran %d times, want once", round, i, n)
			}
		}
	}
	return nil
}
