package attempt

import (
	"context"
	"sync"
	"time"

	"github.com/shirou/gopsutil/v3/process"
)

// Sample is the live resource use of one worker, as last sampled.
type Sample struct {
	PID     int
	Rank    int    // the worker's global rank
	RSS     uint64 // bytes
	PeakRSS uint64 // the largest RSS seen by the sampler
	CPU     time.Duration
	At      time.Time
}

// Sampler polls the live workers' RSS and CPU time with gopsutil every interval. It only starts sampling one
// interval after start, so it never competes with starting the workers.
type Sampler struct {
	interval time.Duration
	notify   func([]Sample)
	mu       sync.Mutex
	live     map[int]*Sample // by pid
	gone     map[int]bool    // pids in live whose worker has exited: kept for remove, no longer sampled
}

func NewSampler(interval time.Duration, notify func([]Sample)) *Sampler {
	return &Sampler{interval: interval, notify: notify, live: map[int]*Sample{}, gone: map[int]bool{}}
}

func (s *Sampler) add(pid, rank int) {
	s.mu.Lock()
	s.live[pid] = &Sample{PID: pid, Rank: rank}
	s.mu.Unlock()
}

// remove stops sampling pid (added) and returns its last sample.
func (s *Sampler) remove(pid int) Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	smp := s.live[pid]
	delete(s.live, pid)
	delete(s.gone, pid)
	return *smp
}

// exited stops sampling pid, whose worker has exited, but keeps its last sample for remove.
func (s *Sampler) exited(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gone[pid] = true
}

// Snapshot returns the current samples of the live workers (not of those that have exited).
func (s *Sampler) Snapshot() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Sample, 0, len(s.live))
	for pid, smp := range s.live {
		if !s.gone[pid] {
			out = append(out, *smp)
		}
	}
	return out
}

func (s *Sampler) Run(ctx context.Context) {
	if s.interval <= 0 {
		return
	}
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.once(ctx)
			s.notify(s.Snapshot())
		}
	}
}

func (s *Sampler) once(ctx context.Context) {
	for _, last := range s.Snapshot() {
		pid := last.PID
		// Not process.NewProcess: it checks the pid with os.FindProcess, whose pidfd stays open until a finalizer
		// runs. The reads below go to /proc/PID alone; a worker that has gone fails them.
		p := &process.Process{Pid: int32(pid)}
		mem, err1 := p.MemoryInfoWithContext(ctx)
		times, err2 := p.TimesWithContext(ctx)
		if err1 != nil && err2 != nil {
			continue
		}
		s.mu.Lock()
		if smp := s.live[pid]; smp != nil {
			smp.At = time.Now()
			if err1 == nil {
				smp.RSS = mem.RSS
				smp.PeakRSS = max(smp.PeakRSS, mem.RSS)
			}
			if err2 == nil {
				smp.CPU = time.Duration((times.User + times.System) * float64(time.Second))
			}
		}
		s.mu.Unlock()
	}
}
