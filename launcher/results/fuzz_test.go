package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"tpurun/worker"
)

// FuzzConsume feeds arbitrary streams to a collector: it must never panic, every error must be a named
// *ContractError, and the document must always encode as valid JSON (no invalid payload slips through).
func FuzzConsume(f *testing.F) {
	frame := func(k worker.Kind, e worker.Encoding, rep int, p string) []byte {
		return append(worker.AppendHeader(nil, k, e, rep, len(p)), p...)
	}
	f.Add(frame(worker.KindResult, worker.EncodingJSON, 0, `{"a":[1,2.5e3,"x"]}`))
	f.Add(frame(worker.KindResult, worker.EncodingJSON, 0, `{"a":`))
	f.Add(frame(worker.KindResult, worker.EncodingJSON, 0, "\"\x01\""))
	f.Add(frame(worker.KindError, worker.EncodingJSON, 1, `{"type":"E","message":"m","traceback":"t"}`))
	f.Add(frame(worker.KindError, worker.EncodingJSON, 1, `[]`))
	f.Add(frame(worker.KindResult, worker.EncodingPickle, 0, "\x80\x05N."))
	f.Add(append(frame(worker.KindResult, worker.EncodingJSON, 0, `1`), frame(worker.KindResult, worker.EncodingJSON, 0, `2`)...))
	f.Add(append(frame(worker.KindResult, worker.EncodingJSON, 7, `1`), "garbage"...))
	f.Add([]byte("TPRF\x02"))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := NewCollector(Options{Required: true, MaxFrameBytes: 1024})
		err := c.Consume(0, 100, []int{0, 1}, bytes.NewReader(in))
		for _, ce := range contractErrors(err) {
			if ce.Rank != 0 || ce.PID != 100 || ce.Hint == "" || ce.Message == "" {
				t.Fatalf("violation without facts: %+v", ce)
			}
		}
		if err != nil && len(contractErrors(err)) == 0 {
			t.Fatalf("unnamed error %v", err)
		}
		doc, ferr := c.Finish([]RankExit{{Rank: 0, PID: 100}})
		if ferr != nil && !errors.Is(ferr, ErrMissingResult) && !errors.Is(ferr, ErrDuplicateResult) && err == nil {
			t.Fatalf("Finish found %v that Consume did not report", ferr)
		}
		b, merr := json.Marshal(doc)
		if merr != nil || !json.Valid(b) {
			t.Fatalf("document does not encode: %v", merr)
		}
		if doc.OK != (ferr == nil && doc.ExitCode == 0) {
			t.Fatalf("ok=%v with exit %d and %v", doc.OK, doc.ExitCode, ferr)
		}
	})
}
