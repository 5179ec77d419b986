package testutil

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// EnvScale names the scale knob: a number (default 1) that multiplies every deadline of the suite. A slow or
// loaded machine (CI on two shared cores, a laptop on battery) raises it; no test changes.
const EnvScale = "TPURUN_TEST_SCALE"

// baseDeadline is how long any single wait of a test may take at scale 1: far longer than any event the tests
// wait for takes on an idle machine (milliseconds to a few seconds; real PyTorch workers importing torch on two
// busy cores take tens of seconds), so that only a bug, never a slow machine, reaches it. Only a failing test
// waits it out.
const baseDeadline = 60 * time.Second

var scale = sync.OnceValue(func() float64 {
	v := os.Getenv(EnvScale)
	if v == "" {
		return 1
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 || f > 1000 {
		panic(fmt.Sprintf("%s=%q: want a positive number such as 1, 2 or 0.5", EnvScale, v))
	}
	return f
})

// Scale is the value of TPURUN_TEST_SCALE (default 1).
func Scale() float64 { return scale() }

// Scaled is d multiplied by the scale knob.
func Scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * scale()) }

// Deadline is how long any one wait may take before the test fails: 60 s times the scale knob. Use it for every
// wait on an event; a test never picks its own number.
func Deadline() time.Duration { return Scaled(baseDeadline) }
