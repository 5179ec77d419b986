package console

import (
	"syscall"
	"time"
)

// Stopped records that tpurun received the stop signal sig (the first one counts): output that the console then
// abandons (at once, or hurried) was lost to it, and Flush says so with a *failure.SignalError.
func (c *Console) Stopped(sig syscall.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopSig == 0 {
		c.stopSig = sig
	}
}

// AfterStop is how long a write may wait for its reader once a stop signal came when nothing was left to stop
// gently (see Stop).
const AfterStop = time.Second

// Stop is what the stop signal sig does to the consoles once no worker runs: it is recorded (Stopped) and each write
// from now on waits at most AfterStop for its reader (Hurry), so that the end of the run is bounded whichever files
// are stalled, and a file whose reader reads still gets its output.
func Stop(sig syscall.Signal, consoles ...*Console) {
	for _, c := range consoles {
		c.Stopped(sig)
		c.Hurry(AfterStop)
	}
}

// Abandon stops waiting for the reader: what is queued and everything written from now on is discarded.
func (c *Console) Abandon() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.abandoned = true
	c.lost += c.queued + c.heldBytes
	c.q, c.queued = nil, 0
	c.owner, c.held, c.heldBytes = nil, nil, 0
	c.more.Broadcast()
}

// Hurry gives the reader at most d more per write, counted from now for a write already waiting: once one write
// has waited that long, the console is abandoned (see Abandon). A second stop signal hurries the consoles: the run
// ends soon even if nobody reads.
func (c *Console) Hurry(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.hurriedAt.IsZero() {
		return
	}
	c.hurriedAt = time.Now()
	go func() {
		t := time.NewTicker(d / 10)
		defer t.Stop()
		for now := range t.C {
			c.mu.Lock()
			done := c.abandoned || c.err != nil || (c.closed && len(c.q) == 0 && !c.writing)
			stalled := c.overdue(now, d)
			c.mu.Unlock()
			if stalled {
				c.Abandon()
				return
			}
			if done {
				return
			}
		}
	}()
}

// overdue reports whether the write in progress has waited d for its reader at now, counting from when it began or
// from when the console was hurried, whichever came later.
func (c *Console) overdue(now time.Time, d time.Duration) bool {
	if !c.writing {
		return false
	}
	from := c.since
	if c.hurriedAt.After(from) {
		from = c.hurriedAt
	}
	return now.Sub(from) >= d
}
