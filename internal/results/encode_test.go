package results

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"tpurun/worker"
)

// checkEncode fails unless Encode writes doc as one line of JSON that decodes to what json.Marshal's encoding of
// it decodes to.
func checkEncode(t testing.TB, doc *Document) {
	t.Helper()
	want, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("json.Marshal: %v", err)
	}
	var b bytes.Buffer
	if err := doc.Encode(&b); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	got := b.Bytes()
	if !bytes.HasSuffix(got, []byte("\n")) || bytes.ContainsAny(got[:len(got)-1], "\r\n") || !json.Valid(got) {
		t.Fatalf("Encode wrote %d bytes that are not one line of JSON: %.300q", len(got), got)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("Encode and json.Marshal differ:\n%.600s\n%.600s", got, want)
	}
}

// TestEncodeMatchesMarshal: the streamed document is json.Marshal's, on one line: a pickled value of several
// pieces (and a length that is no multiple of 3), a JSON value with line breaks and characters json.Marshal
// escapes, an empty document, a run id that spells a results field, and a document with no value.
func TestEncodeMatchesMarshal(t *testing.T) {
	doc := sampleDoc()
	big := make([]byte, 3*encodeChunk+7)
	for i := range big {
		big[i] = byte(i * 7)
	}
	doc.Results = append(doc.Results,
		Result{Replica: 3, Rank: 1, PID: 42, OK: true, Encoding: "pickle", ValueB64: big},
		Result{Replica: 4, Rank: 1, PID: 42, OK: true, Encoding: "json",
			Value: json.RawMessage("{\r\n  \"a\": [1,\n 2],\t\"<b>&\": \"x\\ny\u2028\"\n}")},
		Result{Replica: 5, Rank: 1, PID: 42, OK: true, Encoding: "json", Value: bytes.Repeat([]byte("[]"), 0)})
	checkEncode(t, doc)
	checkEncode(t, &Document{})
	checkEncode(t, &Document{RunID: `x","results":null,"y\"results\":null`, Results: []Result{{Replica: 1}}})
	doc, _ = NewCollector(Options{Required: true}).Finish([]RankExit{{Rank: 0, PID: 1, ExitCode: 3}})
	checkEncode(t, doc)
}

// TestEncodeFramed: --json-frames's output is a result frame per pickled value, in the document's order and
// decoded by the worker package's frame decoder as the worker sent it, a newline, then the document of Encode with
// "framed": true in place of each "value_b64"; a document without a pickled value is Encode's alone.
func TestEncodeFramed(t *testing.T) {
	doc := sampleDoc()
	big := bytes.Repeat([]byte("\nTPRF{\x00"), encodeChunk) // line breaks, the magic and braces inside a value
	doc.Results = append(doc.Results,
		Result{Replica: 7, Rank: 1, PID: 42, OK: true, Encoding: "pickle", ValueB64: big},
		Result{Replica: 2, Rank: 0, PID: 41, OK: true, Encoding: "pickle", ValueB64: []byte("\x80\x05K\x01.")})
	var b bytes.Buffer
	if err := doc.EncodeFramed(&b); err != nil {
		t.Fatal(err)
	}
	var pickled []Result
	for _, r := range doc.Results {
		if r.Encoding == "pickle" {
			pickled = append(pickled, r)
		}
	}
	dec := worker.NewDecoder(bytes.NewReader(b.Bytes()), 1<<30, 0)
	for i, want := range pickled { // replicas 1, 7, 2
		if f, err := dec.Next(); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		} else if f.Kind != worker.KindResult || f.Encoding != worker.EncodingPickle || f.Replica != want.Replica || !bytes.Equal(f.Payload, want.ValueB64) {
			t.Fatalf("frame %d: %v %v replica %d, %d bytes; want replica %d's pickle (%d bytes)", i, f.Kind, f.Encoding, f.Replica, len(f.Payload), want.Replica, len(want.ValueB64))
		}
	}
	rest := b.Bytes()[dec.Offset():]
	if len(rest) == 0 || rest[0] != '\n' {
		t.Fatalf("after the frames: %.40q, want a newline, then the document", rest)
	}
	line := rest[1:]
	if !bytes.HasSuffix(line, []byte("\n")) || bytes.ContainsAny(line[:len(line)-1], "\r\n") {
		t.Fatalf("the document is not one line: %.300q", line)
	}
	var framed, plain map[string]any
	if err := json.Unmarshal(line, &framed); err != nil {
		t.Fatal(err)
	}
	var p bytes.Buffer
	if err := doc.Encode(&p); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(p.Bytes(), &plain); err != nil {
		t.Fatal(err)
	}
	for _, r := range plain["results"].([]any) {
		if r := r.(map[string]any); r["value_b64"] != nil {
			delete(r, "value_b64")
			r["framed"] = true
		}
	}
	if !reflect.DeepEqual(framed, plain) {
		t.Fatalf("the framed document differs from Encode's with framed values:\n%.600s\n%.600s", line, p.Bytes())
	}

	// No pickled value: nothing before the document.
	doc = sampleDoc()
	doc.Results = append(doc.Results[:1], doc.Results[2:]...)
	var f bytes.Buffer
	p.Reset()
	if err := doc.EncodeFramed(&f); err != nil {
		t.Fatal(err)
	}
	if err := doc.Encode(&p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.Bytes(), p.Bytes()) {
		t.Fatalf("without pickled values EncodeFramed wrote %.300q, Encode %.300q", f.Bytes(), p.Bytes())
	}
}
