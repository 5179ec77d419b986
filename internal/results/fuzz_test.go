package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"tpurun/worker"
)

// FuzzConsume feeds arbitrary streams to a collector: it must never panic, every error must be a named
// *ContractError, and the document must always encode as valid JSON (no invalid payload slips through), streamed as one line too.
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
		checkEncode(t, doc)
		if doc.OK != (ferr == nil && doc.ExitCode == 0) {
			t.Fatalf("ok=%v with exit %d and %v", doc.OK, doc.ExitCode, ferr)
		}
	})
}

// FuzzAdd merges arbitrary shares (as another node's rendezvous message carries them) into node 0's collector:
// it must never panic, every violation a share brings stays in the document, and the document always encodes (streamed too).
func FuzzAdd(f *testing.F) {
	f.Add([]byte(`{"workers":[{"rank":1,"pid":5,"replicas":[1]}],"violations":[{"kind":"malformed_frame","replica":-1,"rank":1,"pid":5,"message":"m","hint":"h"}]}`))
	f.Add([]byte(`{"workers":[{"rank":1,"pid":5,"replicas":[0,1]}],"results":[{"replica":0,"rank":1,"pid":5,"ok":true,"encoding":"json","value":1}],"violations":[{"kind":"foreign_replica","replica":0,"rank":1,"pid":5,"message":"m"}]}`))
	f.Add([]byte(`{"workers":[{"rank":0,"pid":9,"replicas":[7]}],"violations":[{"kind":"from_the_future","message":"?"}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var s Share
		if json.Unmarshal(in, &s) != nil {
			return
		}
		c := NewCollector(Options{Required: true, Nodes: 2})
		if err := c.Consume(0, 100, []int{0}, bytes.NewReader(frameOf(0))); err != nil {
			t.Fatal(err)
		}
		_ = c.Add(1, &s)
		exits := []RankExit{{Rank: 0, PID: 100}}
		for _, w := range s.Workers {
			exits = append(exits, RankExit{Rank: w.Rank, PID: w.PID})
		}
		doc, ferr := c.Finish(exits)
		if len(s.Violations) > 0 && (ferr == nil || doc.OK || len(doc.Violations) == 0) {
			t.Fatalf("%d shared violations lost: ok=%v %v", len(s.Violations), doc.OK, ferr)
		}
		b, merr := json.Marshal(doc)
		if merr != nil || !json.Valid(b) {
			t.Fatalf("document does not encode: %v", merr)
		}
		checkEncode(t, doc)
	})
}

// frameOf is one JSON result frame for replica.
func frameOf(replica int) []byte {
	return append(worker.AppendHeader(nil, worker.KindResult, worker.EncodingJSON, replica, 1), '1')
}
