package results

import (
	"bytes"
	"io"
	"os"
	"sync"
	"testing"

	"tpurun/worker"
)

const benchWorkers, benchBytes = 8, 32 << 20

// benchPayload is one 32 MiB JSON value (a string).
var benchPayload = sync.OnceValue(func() []byte {
	b := bytes.Repeat([]byte("a"), benchBytes)
	b[0], b[len(b)-1] = '"', '"'
	return b
})

// pipes starts benchWorkers writers, each sending one 32 MiB frame on its own os.Pipe, and returns the read ends.
func pipes(b *testing.B, payload []byte) ([]*os.File, *sync.WaitGroup) {
	rs := make([]*os.File, benchWorkers)
	var wg sync.WaitGroup
	for i := range rs {
		r, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		rs[i] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Close()
			if err := worker.NewClient(w, []int{i}).Send(worker.Frame{Kind: worker.KindResult,
				Encoding: worker.EncodingJSON, Replica: i, Payload: payload}); err != nil {
				b.Error(err)
			}
		}()
	}
	return rs, &wg
}

// BenchmarkConsume: 8 workers x 32 MiB of results through Consume (decode, validate, keep).
func BenchmarkConsume(b *testing.B) {
	payload := benchPayload()
	b.SetBytes(benchWorkers * benchBytes)
	for b.Loop() {
		c := NewCollector(Options{})
		rs, wg := pipes(b, payload)
		var cw sync.WaitGroup
		for i, r := range rs {
			cw.Add(1)
			go func() {
				defer cw.Done()
				if err := c.Consume(i, 1000+i, []int{i}, r); err != nil {
					b.Error(err)
				}
				r.Close()
			}()
		}
		cw.Wait()
		wg.Wait()
		if n := len(c.Share().Results); n != benchWorkers {
			b.Fatalf("%d results", n)
		}
	}
}

// BenchmarkPipeBaseline: the same bytes through plain pipes into io.Discard, the ceiling for Consume.
func BenchmarkPipeBaseline(b *testing.B) {
	payload := benchPayload()
	b.SetBytes(benchWorkers * benchBytes)
	for b.Loop() {
		rs, wg := pipes(b, payload)
		var cw sync.WaitGroup
		for _, r := range rs {
			cw.Add(1)
			go func() {
				defer cw.Done()
				io.CopyBuffer(io.Discard, r, make([]byte, 1<<20))
				r.Close()
			}()
		}
		cw.Wait()
		wg.Wait()
	}
}
