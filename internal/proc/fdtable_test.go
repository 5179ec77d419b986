package proc_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"tpurun/internal/proc"
	"tpurun/internal/testutil"
)

func init() {
	testutil.Define(testutil.Verb{Name: "reserve-fds-main", Run: func(*testutil.Worker) int { return okOr(reserveFDsMain()) }})
}

// TestReserveFDsGrowsTheTableOnce: a reservation whose least fits leaves the table alone; one whose least does not
// returns having begun the growth, the table reaches the size asked in one step, another reservation for the same
// burst needs none, and most descriptors opened after it find room without another growth. In a re-executed binary:
// its table is its own, and no other test opens descriptors in it meanwhile.
func TestReserveFDsGrowsTheTableOnce(t *testing.T) { runMain(t, "reserve-fds-main") }

func reserveFDsMain() error {
	self := os.Getpid()
	size := testutil.FDTableSize(self)
	if size == 0 {
		return errors.New("no FDSize in /proc/self/status")
	}
	begun, room := proc.ReserveFDsAhead(1, 8*size)
	if begun != nil {
		return fmt.Errorf("a reservation of at least 1 descriptor in a table of %d began a growth", size)
	}
	if room <= 2 || room >= size {
		return fmt.Errorf("room %d in a table of %d (3 descriptors at least are open)", room, size)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return err
	}
	_, after := proc.ReserveFDsAhead(1, 8*size)
	_, _ = unix.Close(p[0]), unix.Close(p[1])
	if after > room-2 {
		return fmt.Errorf("room %d with a pipe more open, %d without", after, room)
	}
	most := 3 * size
	begun, _ = proc.ReserveFDsAhead(size, most)
	if begun == nil {
		return fmt.Errorf("a reservation of at least %d descriptors in a table of %d began no growth", size, size)
	}
	<-begun
	if err := testutil.Poll(fmt.Sprintf("the table grown to %d entries at least", size+most), func() error {
		if now := testutil.FDTableSize(self); now < size+most {
			return fmt.Errorf("it has %d", now)
		}
		return nil
	}); err != nil {
		return err
	}
	grown := testutil.FDTableSize(self)
	if again, _ := proc.ReserveFDsAhead(size, most); again != nil {
		return fmt.Errorf("a reservation for the burst reserved already began another growth (table of %d entries)", grown)
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
	if now := testutil.FDTableSize(self); now != grown {
		return fmt.Errorf("%d descriptors opened after a reservation of %d grew the table again: %d entries, then %d", len(fds), most, grown, now)
	}
	return nil
}
