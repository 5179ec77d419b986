package console

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPtyReadToTheEnd: a worker's pseudo-terminal has the window size asked for, does not echo, keeps a newline as
// written, and its master is read to the last byte: the EIO that follows the slave's close is the end of the output
// (Run returns nil), also for more output than the terminal buffers (the writer waits for the reader).
func TestPtyReadToTheEnd(t *testing.T) {
	m, s, err := OpenPty(&unix.Winsize{Row: 33, Col: 91})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ws, err := unix.IoctlGetWinsize(int(s.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Row != 33 || ws.Col != 91 {
		t.Fatalf("window size %+v, %v: want 33 rows, 91 columns", ws, err)
	}
	tio, err := unix.IoctlGetTermios(int(s.Fd()), unix.TCGETS)
	if err != nil || tio.Lflag&unix.ECHO != 0 || tio.Oflag&unix.ONLCR != 0 {
		t.Fatalf("modes %+v, %v: want -echo -onlcr", tio, err)
	}
	want := bytes.Repeat([]byte("0123456789abcdef\r\n"), 8<<10) // 144 KiB
	go func() {
		_, _ = s.Write(want)
		_ = s.Close()
	}()
	var got bytes.Buffer
	var d Drain
	if err := (&Forwarder{File: &got}).Run(d.Reader(m)); err != nil {
		t.Fatalf("Run: %v, want the end of the output", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("read %d bytes, want the %d written, as written", got.Len(), len(want))
	}
}
