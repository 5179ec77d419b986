package attempt

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// The garbage collector during a start burst: off, within a bound on the process's memory (quietGC).

// memoryInUse is what the runtime counts against its memory limit: all it has mapped, less the heap it gave
// back to the system. From runtime/metrics: runtime.ReadMemStats would stop the world at every start.
func memoryInUse() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64() - s[1].Value.Uint64())
}

// gcQuiet counts the start bursts under way (see quietGC) and keeps the collector's settings from before the first.
var gcQuiet struct {
	sync.Mutex
	bursts  int
	percent int
	limit   int64
}

// quietHeadroom is how much the process's memory may grow during a start burst, at least, before the collector
// runs: far more than a start of thousands of workers allocates.
const quietHeadroom = 64 << 20

// quietGC turns the garbage collector off until the returned function is called: a start burst allocates a little
// for each of many workers, and a collection in the middle of it would only scan what is still in use. It stays off
// while the process's memory at most doubles (by quietHeadroom at least; a memory limit): a long start (a slow
// preloaded interpreter, a loaded host) does not keep every byte the started workers' output costs meanwhile.
// Bursts may overlap (several jobs in one process): the collector runs again once the last one ends.
func quietGC() (restore func()) {
	gcQuiet.Lock()
	if gcQuiet.bursts == 0 {
		used := memoryInUse()
		gcQuiet.limit = debug.SetMemoryLimit(-1)
		debug.SetMemoryLimit(min(gcQuiet.limit, used+max(used, quietHeadroom)))
		gcQuiet.percent = debug.SetGCPercent(-1)
	}
	gcQuiet.bursts++
	gcQuiet.Unlock()
	return func() {
		gcQuiet.Lock()
		defer gcQuiet.Unlock()
		if gcQuiet.bursts--; gcQuiet.bursts == 0 {
			debug.SetGCPercent(gcQuiet.percent)
			debug.SetMemoryLimit(gcQuiet.limit)
		}
	}
}
