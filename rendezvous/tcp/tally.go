package tcp

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// Reasons a connection is refused before it is served (Stats.Refused, and the fields of the summary line).
const (
	reasonTimedOut     = "timed_out"
	reasonHungUp       = "hung_up"
	reasonEvicted      = "evicted"
	reasonBadHello     = "bad_hello"
	reasonVersion      = "version"
	reasonBadToken     = "bad_token"
	reasonFull         = "full"
	reasonAcceptFailed = "accept_failed"
)

var reasons = []string{reasonTimedOut, reasonHungUp, reasonEvicted, reasonBadHello, reasonVersion, reasonBadToken, reasonFull, reasonAcceptFailed}

// tally counts the server's connections and logs refusals at most once per interval: the first refusal of an
// interval at once, the others as counts in one line when the interval ends, so a flood of bad connections costs
// the log one line per interval.
type tally struct {
	log   *zap.Logger
	every time.Duration

	mu         sync.Mutex
	accepts    int64
	auths      int64
	total      map[string]int64
	since      map[string]int64 // since the last line
	lastRemote string
	lastErr    error
	logged     time.Time // when the last line was written
	timer      *time.Timer
	closed     bool
}

func newTally(log *zap.Logger, every time.Duration) *tally {
	return &tally{log: log, every: every, total: map[string]int64{}, since: map[string]int64{}}
}

func (t *tally) accepted() {
	t.mu.Lock()
	t.accepts++
	t.mu.Unlock()
}

func (t *tally) authenticated() {
	t.mu.Lock()
	t.auths++
	t.mu.Unlock()
}

// refused counts one refusal, and logs now or schedules the interval's summary.
func (t *tally) refused(reason, remote string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total[reason]++
	t.since[reason]++
	t.lastRemote, t.lastErr = remote, err
	if t.closed || t.timer != nil {
		return
	}
	if wait := t.every - time.Since(t.logged); wait > 0 {
		t.timer = time.AfterFunc(wait, t.flush)
		return
	}
	t.flushLocked()
}

func (t *tally) flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.timer = nil
	t.flushLocked()
}

func (t *tally) flushLocked() {
	if len(t.since) == 0 {
		return
	}
	fields := make([]zap.Field, 0, len(reasons)+3)
	for _, r := range reasons {
		if n := t.since[r]; n > 0 {
			fields = append(fields, zap.Int64(r, n))
		}
	}
	if t.lastRemote != "" {
		fields = append(fields, zap.String("last_remote", t.lastRemote))
	}
	if t.lastErr != nil {
		fields = append(fields, zap.NamedError("last_error", t.lastErr))
	}
	fields = append(fields, zap.Duration("at_most_one_line_per", t.every))
	t.log.Warn("rendezvous refused connections before serving them", fields...)
	clear(t.since)
	t.logged = time.Now()
}

// stop writes what is left and logs nothing more.
func (t *tally) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	t.flushLocked()
}

func (t *tally) stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := Stats{Accepted: t.accepts, Authenticated: t.auths, Refused: map[string]int64{}}
	for k, v := range t.total {
		st.Refused[k] = v
	}
	return st
}
