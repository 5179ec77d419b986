package proc_test

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"tpurun/launcher/launchertest"
	"tpurun/launcher/proc"
)

func init() {
	launchertest.Define(launchertest.Verb{Name: "reserve-fds-main", Run: func(*launchertest.Worker) int { return okOr(reserveFDsMain()) }})
	launchertest.Define(launchertest.Verb{Name: "reserve-fds-ahead-main", Run: func(*launchertest.Worker) int { return okOr(reserveFDsAheadMain()) }})
}

// TestReserveFDsGrowsTheTableOnce: a reservation whose least fits leaves the table alone; one whose least does not
// grows it in one step to hold most, and most descriptors opened after it find room without another growth. In a
// re-executed binary: its table is its own, and no other test opens descriptors in it meanwhile.
func TestReserveFDsGrowsTheTableOnce(t *testing.T) { runMain(t, "reserve-fds-main") }

func reserveFDsMain() error {
	size := proc.FDTableSize()
	if size == 0 {
		return errors.New("no FDSize in /proc/self/status")
	}
	if proc.ReserveFDs(1, 8*size) {
		return fmt.Errorf("a reservation of at least 1 descriptor in a table of %d grew it", size)
	}
	if now := proc.FDTableSize(); now != size {
		return fmt.Errorf("a reservation that fits changed the table from %d to %d entries", size, now)
	}
	most := 3 * size
	if !proc.ReserveFDs(size, most) {
		return fmt.Errorf("a reservation of at least %d descriptors in a table of %d did not grow it", size, size)
	}
	grown := proc.FDTableSize()
	if grown < size+most {
		return fmt.Errorf("reserved %d more in a table of %d: it has %d entries, want %d at least", most, size, grown, size+most)
	}
	var fds []int
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	for len(fds) < most {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return fmt.Errorf("pipe %d: %w", len(fds)/2, err)
		}
		fds = append(fds, p[0], p[1])
	}
	if now := proc.FDTableSize(); now != grown {
		return fmt.Errorf("%d descriptors opened after a reservation of %d grew the table again: %d entries, then %d", len(fds), most, grown, now)
	}
	return nil
}

// TestReserveFDsAheadGrowsTheTableMeanwhile: ReserveFDsAhead leaves a table where least fits alone; otherwise it
// returns having begun the growth, the table reaches the size asked, and a ReserveFDs for the same burst then finds
// the room made (no second growth). In a re-executed binary, as above.
func TestReserveFDsAheadGrowsTheTableMeanwhile(t *testing.T) { runMain(t, "reserve-fds-ahead-main") }

func reserveFDsAheadMain() error {
	size := proc.FDTableSize()
	if size == 0 {
		return errors.New("no FDSize in /proc/self/status")
	}
	if proc.ReserveFDsAhead(1, 8*size) != nil {
		return fmt.Errorf("a reservation of at least 1 descriptor in a table of %d began a growth", size)
	}
	most := 3 * size
	begun := proc.ReserveFDsAhead(size, most)
	if begun == nil {
		return fmt.Errorf("a reservation of at least %d descriptors in a table of %d began no growth", size, size)
	}
	<-begun
	if err := launchertest.Poll(fmt.Sprintf("the table grown to %d entries at least", size+most), func() error {
		if now := proc.FDTableSize(); now < size+most {
			return fmt.Errorf("it has %d", now)
		}
		return nil
	}); err != nil {
		return err
	}
	if grown := proc.FDTableSize(); proc.ReserveFDs(size, most) {
		return fmt.Errorf("ReserveFDs for the burst reserved ahead grew the table again (from %d entries to %d)", grown, proc.FDTableSize())
	}
	return nil
}
