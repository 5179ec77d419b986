package worker_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"tpurun/worker"
)

// A worker reports one result per replica it owns. Under tpurun, worker.Report writes to the result channel
// tpurun opened for this process; outside tpurun there is none, and Report says so instead of writing into
// whatever descriptor 3 happens to be.
func ExampleReport() {
	err := worker.Report(0, map[string]float64{"loss": 0.25})
	fmt.Println(errors.Is(err, worker.ErrNoChannel))

	// What tpurun reads is one frame per call: here a client on a buffer, decoded the way the launcher does.
	var channel bytes.Buffer
	c := worker.NewClient(&channel, []int{0, 1})
	_ = c.Report(0, map[string]float64{"loss": 0.25})
	_ = c.Fail(1, errors.New("out of memory"))
	fmt.Println(c.Report(7, "x") != nil) // replica 7 is not this worker's
	d := worker.NewDecoder(&channel, 1<<20, 4096)
	for {
		f, err := d.Next()
		if err != nil {
			break
		}
		if f.Kind == worker.KindError { // a JSON ErrorInfo: type, message and the reporting goroutine's stack
			var info worker.ErrorInfo
			_ = json.Unmarshal(f.Payload, &info)
			fmt.Printf("%s replica %d: %s %q\n", f.Kind, f.Replica, info.Type, info.Message)
			continue
		}
		fmt.Printf("%s replica %d: %s\n", f.Kind, f.Replica, f.Payload)
	}
	// Output:
	// true
	// true
	// result replica 0: {"loss":0.25}
	// error replica 1: *errors.errorString "out of memory"
}
