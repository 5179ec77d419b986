package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"

	"tpurun/rendezvous"
)

func TestWireRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	in := &message{Type: msgJoin, ID: 7, NNodes: 2, Member: &rendezvous.Member{Instance: "i", Host: "h", LocalWorkers: 4, Rank: -1}}
	if err := writeMessage(&buf, in, DefaultMaxMessage); err != nil {
		t.Fatal(err)
	}
	out, err := readMessage(&buf, DefaultMaxMessage)
	if err != nil || out.ID != 7 || out.Member.Host != "h" || out.V != Version {
		t.Fatalf("%+v %v", out, err)
	}
	if _, err := readMessage(&buf, DefaultMaxMessage); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
	big := &message{Type: msgPublish, Data: make([]byte, 100)}
	if err := writeMessage(&buf, big, 50); !errors.Is(err, rendezvous.ErrProtocol) {
		t.Fatalf("oversized write: %v", err)
	}
}

func TestReadMessageRefusesBeforeAllocating(t *testing.T) {
	hdr := make([]byte, 4)
	binary.BigEndian.PutUint32(hdr, 1<<31)
	allocs := testing.AllocsPerRun(10, func() {
		if _, err := readMessage(bytes.NewReader(hdr), 1024); !errors.Is(err, rendezvous.ErrProtocol) {
			t.Fatal(err)
		}
	})
	if allocs > 10 {
		t.Fatalf("%v allocations to refuse an oversized frame", allocs)
	}
}

// TestReadMessageAllocatesAsDataArrives: a frame announcing 4 MiB whose sender stops after a few bytes costs the
// reader what arrived (at most the first chunk), not what was announced.
func TestReadMessageAllocatesAsDataArrives(t *testing.T) {
	frame := make([]byte, 4+100)
	binary.BigEndian.PutUint32(frame, 4<<20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 10 {
		if _, err := readMessage(bytes.NewReader(frame), DefaultMaxMessage); err != io.ErrUnexpectedEOF {
			t.Fatalf("truncated frame: %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / 10; per > 2*firstChunk {
		t.Fatalf("%d KiB allocated per truncated 4 MiB frame, want at most %d KiB", per>>10, 2*firstChunk>>10)
	}
	// and a whole large frame still reads, grown as it arrives
	var buf bytes.Buffer
	big := &message{Type: msgPublish, Name: "r", Data: bytes.Repeat([]byte{7}, 2<<20)}
	if err := writeMessage(&buf, big, DefaultMaxMessage); err != nil {
		t.Fatal(err)
	}
	m, err := readMessage(iotest.OneByteReader(&buf), DefaultMaxMessage)
	if err != nil || !bytes.Equal(m.Data, big.Data) {
		t.Fatalf("large frame: %v", err)
	}
}

func FuzzDecodeMessage(f *testing.F) {
	seeds := []string{
		`{"v":2,"type":"ping"}`,
		`{"v":2,"type":"join","nnodes":2,"member":{"instance":"a","host":"h","local_workers":4,"rank":-1}}`,
		`{"v":2,"type":"join","nnodes":2,"member":{"instance":"a","local_workers":4,"rank":5}}`,
		`{"v":2,"type":"join","nnodes":99999999,"member":{"instance":"a","local_workers":1,"rank":-1}}`,
		`{"v":2,"type":"join","nnodes":4,"min_nodes":2,"last_call_ms":500,"member":{"instance":"a","local_workers":1,"rank":3,"generation":-1}}`,
		`{"v":2,"type":"join","nnodes":4,"min_nodes":9,"member":{"instance":"a","local_workers":1,"rank":-1}}`,
		`{"v":2,"type":"join","nnodes":2,"member":{"instance":"a","local_workers":1,"rank":-1,"run_id":"../x"}}`,
		`{"v":2,"type":"join","nnodes":2,"member":{"instance":"a/b","host":"h\n","local_workers":1,"rank":-1}}`,
		`{"v":1,"type":"ping","token":"t"}`, `{"v":2}`, `null`, `[]`, `{"v":2,"type":"reply","gathered":{"x":"AA=="}}`,
		`{"v":2,"type":"reply","gathered":{"1":"not base64"}}`, `{"v":2,"type":"fail","failure":{"node":{"rank":1}}}`,
		`{"v":2,"type":"reply","waiting":3}`, `{"v":2,"type":"reply","error":{"code":"node_lost","nodes":[{"rank":2}],"generation":4}}`,
		`{"v":2,"type":"barrier","timeout_ms":-1}`, "\x00\x00", `{"v":2,"type":"ping"}garbage`, `{"v":1e400}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := decodeMessage(body)
		if err != nil {
			var e *rendezvous.Error
			if !errors.As(err, &e) {
				t.Fatalf("decode error %T %v is not an *Error", err, err)
			}
			return
		}
		// what decodes must re-encode and decode the same
		var buf bytes.Buffer
		if err := writeMessage(&buf, m, 1<<30); err != nil {
			t.Fatal(err)
		}
		if _, err := readMessage(&buf, 1<<30); err != nil {
			t.Fatalf("re-read: %v", err)
		}
	})
}
