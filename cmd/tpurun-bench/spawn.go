package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// spawnCaller returns 8 replicas' results of N bytes through tpurun.spawn and checks them: each replica's value is
// N bytes of its index (bytes go by pickle, as weights and activations do).
const spawnCaller = `import sys, tpurun, spawnbench
n, binary = int(sys.argv[1]), sys.argv[2]
res = tpurun.spawn(spawnbench.payload, args=(n,), nprocs=8, tpurun=binary)
bad = [i for i in range(8) if not (type(res.get(i)) is bytes and len(res[i]) == n and res[i][:1] == res[i][-1:] == bytes([i]))]
sys.exit("wrong results for replicas %s" % bad if bad or len(res) != 8 else 0)
`

// spawnModule is the function the workers run (imported by name from PYTHONPATH).
const spawnModule = `def payload(index, n):
    return bytes([index]) * n
`

// pipeCaller is spawnCaller's baseline: the same interpreter starts 8 of itself, each writing the same N bytes to
// a pipe, and reads every pipe to its end (one thread each), with the same check.
const pipeCaller = `import subprocess, sys, threading
n = int(sys.argv[1])
code = "import sys; sys.stdout.buffer.write(bytes([int(sys.argv[1])]) * int(sys.argv[2]))"
procs = [subprocess.Popen([sys.executable, "-c", code, str(i), str(n)], stdout=subprocess.PIPE) for i in range(8)]
res = {}
def read(i, p):
    res[i] = p.stdout.read()
ts = [threading.Thread(target=read, args=(i, p)) for i, p in enumerate(procs)]
for t in ts:
    t.start()
for t in ts:
    t.join()
codes = [p.wait() for p in procs]
bad = [i for i in range(8) if not (len(res[i]) == n and res[i][:1] == res[i][-1:] == bytes([i]))]
sys.exit("exit codes %s, wrong results for replicas %s" % (codes, bad) if bad or any(codes) else 0)
`

// measureSpawn returns 8 × 32 MiB of bytes from 8 workers to a Python caller through tpurun.spawn (tpurun
// --json-frames: each pickled value as a frame before the results document on its stdout, unpickled by the module
// from the pipe), against the same interpreter reading the same bytes from 8 pipes of 8 children of its own.
func measureSpawn(cfg *config) (row, error) {
	per := int64(32 << 20)
	if cfg.quick {
		per = 4 << 20
	}
	n := strconv.FormatInt(per, 10)
	dir, err := os.MkdirTemp("", "tpurun-bench-spawn-")
	if err != nil {
		return row{}, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "spawnbench.py"), []byte(spawnModule), 0o644); err != nil {
		return row{}, err
	}
	env := []string{"PYTHONPATH=" + cfg.pymodule + string(os.PathListSeparator) + dir, "PYTHONDONTWRITEBYTECODE=1"}
	tp, err := repeat(max(3, cfg.runs/2), func() (sample, error) {
		return run([]string{cfg.python, "-c", spawnCaller, n, cfg.tpurun}, env, nil)
	})
	if err != nil {
		return row{}, err
	}
	base, err := repeat(max(3, cfg.runs/2), func() (sample, error) {
		return run([]string{cfg.python, "-c", pipeCaller, n}, env, nil)
	})
	if err != nil {
		return row{}, err
	}
	mbps := func(d time.Duration) float64 { return float64(8*per) / 1e6 / seconds(d) }
	ratio := mbps(tp.wall) / mbps(base.wall)
	return row{
		name: fmt.Sprintf("spawn results 8 × %d MiB bytes", per>>20), figure: fmt.Sprintf("%.0f MB/s", mbps(tp.wall)),
		baseline: fmt.Sprintf("Python reading pipes: %.0f MB/s", mbps(base.wall)), ratio: ratio, target: "≥ 0.8",
		pass: ratio >= 0.8,
		note: fmt.Sprintf("tpurun.spawn in %s (--json-frames: pickled values as frames before the document) against the same interpreter reading "+
			"8 children's pipes; both include the workers' start and check every value", cfg.python),
	}, nil
}
