package proc

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// TestWatchParentByPolling: where no pidfd can watch the parent (pidfd_open missing or refused by seccomp), the
// parent's exit is noticed by getppid changing: a parent that is no longer this process's parent is signalled at
// the next look; the parent this process still has is not.
func TestWatchParentByPolling(t *testing.T) {
	got := make(chan os.Signal, 1)
	signal.Notify(got, syscall.SIGUSR1)
	defer signal.Stop(got)

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); watchParentByPolling(os.Getppid(), syscall.SIGUSR1, time.Millisecond, stop) }()
	// An absence: only time can show it. 50 looks at the parent this process still has send nothing.
	select {
	case s := <-got:
		t.Fatalf("the live parent was taken for gone: %v", s)
	case <-time.After(50 * time.Millisecond):
	}
	close(stop)
	<-done

	// A parent this process no longer has (re-parented: getppid differs): the signal comes.
	go watchParentByPolling(os.Getppid()+1<<22, syscall.SIGUSR1, time.Millisecond, nil)
	select {
	case <-got:
	case <-time.After(time.Minute):
		t.Fatal("a parent that is gone was not noticed within a minute")
	}
}
