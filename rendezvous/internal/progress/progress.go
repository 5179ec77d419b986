// Package progress is how a node that waits for others says so: one line every interval (the rendezvous option
// progress_interval, default 5 s) naming who has arrived, who is missing and how long it will still wait, never
// a line per event. For the rendezvous backends.
package progress

import (
	"strconv"
	"strings"
	"sync"
	"time"
)

// Key is the rendezvous option that sets the interval; Default is the interval without it.
const (
	Key     = "progress_interval"
	Default = 5 * time.Second
)

// Interval is the interval conf sets (seconds, or a Go duration like "5s"), else Default. The option's value is
// checked where the configuration is (rendezvous.New): a value that does not parse counts as none here.
func Interval(conf map[string]string) time.Duration {
	v, ok := conf[Key]
	if !ok {
		return Default
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 && f < 1e6 {
		return time.Duration(f * float64(time.Second))
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d
	}
	return Default
}

// Every calls line every interval d, the first time d from now, until stop is called (after which line is not
// called again, and stop returns once a call under way has ended).
func Every(d time.Duration, line func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				line()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

// Left is how long until deadline, in whole seconds (at least 0), for a line.
func Left(deadline time.Time) time.Duration {
	return max(time.Until(deadline), 0).Round(time.Second)
}

// List joins the first n of names, and says how many more there are ("none" for no names).
func List(names []string, n int) string {
	switch {
	case len(names) == 0:
		return "none"
	case len(names) <= n:
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + " and " + strconv.Itoa(len(names)-n) + " more"
}
