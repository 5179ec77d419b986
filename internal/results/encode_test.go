package results

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
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
// escapes, an empty document, and a document with no value.
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
	doc, _ = NewCollector(Options{Required: true}).Finish([]RankExit{{Rank: 0, PID: 1, ExitCode: 3}})
	checkEncode(t, doc)
}
