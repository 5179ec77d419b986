package worker

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestChannelID(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	idw, err := ChannelID(w)
	if err != nil {
		t.Fatal(err)
	}
	idr, _ := ChannelID(r)
	var st syscall.Stat_t
	if err := syscall.Fstat(int(w.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	dev, ino, err := ParseChannelID(idw)
	if err != nil || idw != idr || dev != uint64(st.Dev) || ino != st.Ino {
		t.Fatalf("ChannelID %q (read end %q) parses to %d:%d, %v; fstat says %d:%d", idw, idr, dev, ino, err, st.Dev, st.Ino)
	}
}

func TestParseChannelIDBad(t *testing.T) {
	for _, s := range []string{"", "1", ":", "1:", ":2", "a:b", "-1:2", "1:+2", "1:2:3", "1_0:2", "0x1:2", "1 :2",
		"18446744073709551616:1", "1:18446744073709551616", "١:٢"} {
		_, _, err := ParseChannelID(s)
		var ee *EnvError
		if !errors.Is(err, ErrBadEnv) || !errors.As(err, &ee) || ee.Var != EnvResultID {
			t.Errorf("ParseChannelID(%q) = %v, want ErrBadEnv for %s", s, err, EnvResultID)
		}
	}
	if d, i, err := ParseChannelID(" 18446744073709551615:7 "); err != nil || d != 1<<64-1 || i != 7 {
		t.Errorf("%d:%d %v", d, i, err)
	}
}

func FuzzParseChannelID(f *testing.F) {
	for _, s := range []string{"14:5678", "", "1:2:3", "-1:1", "9999999999999999999999:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		dev, ino, err := ParseChannelID(s)
		if err != nil {
			return
		}
		d2, i2, err := ParseChannelID(formatChannelID(dev, ino))
		if err != nil || d2 != dev || i2 != ino {
			t.Fatalf("%q parsed to %d:%d, which does not round-trip: %d:%d %v", s, dev, ino, d2, i2, err)
		}
	})
}

// TestOpenRefusesForeignDescriptor: with TPURUN_RESULT_ID set, Open takes only the very pipe it names, open for
// writing: a regular file at that number (what a program started by a worker may hold there), the pipe's read
// end, or a malformed identity are refused, naming the variables; nothing is written to the file.
func TestOpenRefusesForeignDescriptor(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	id, err := ChannelID(w)
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	// Open wraps the descriptor in an *os.File that closes it when collected: hand it a duplicate.
	dup := func(f *os.File) string {
		fd, err := syscall.Dup(int(f.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Close(fd) })
		return strconv.Itoa(fd)
	}
	t.Setenv(EnvReplicas, "0")
	for _, tc := range []struct {
		name, fd, id, wantVar, want string
	}{
		{"regular file", dup(file), id, EnvResultFD, "is a regular file"},
		{"read end", dup(r), id, EnvResultFD, "open read-only"},
		{"malformed identity", dup(w), "pipe:3", EnvResultID, "want <st_dev>:<st_ino>"},
		{"other pipe", dup(w), "1:1", EnvResultFD, "not the pipe " + EnvResultID + "=1:1 names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvResultFD, tc.fd)
			t.Setenv(EnvResultID, tc.id)
			c, err := Open()
			var ee *EnvError
			if c != nil || !errors.Is(err, ErrBadEnv) || !errors.As(err, &ee) || ee.Var != tc.wantVar || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v, %v; want ErrBadEnv for %s saying %q", c, err, tc.wantVar, tc.want)
			}
		})
	}
	if fi, _ := file.Stat(); fi.Size() != 0 {
		t.Fatalf("%d bytes were written into the foreign file", fi.Size())
	}

	t.Run("the pipe itself", func(t *testing.T) {
		t.Setenv(EnvResultFD, dup(w))
		t.Setenv(EnvResultID, id)
		c, err := Open()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Report(0, "ok"); err != nil {
			t.Fatal(err)
		}
		c.Close()
		want, _ := Encode(Frame{Kind: KindResult, Encoding: EncodingJSON, Replica: 0, Payload: []byte(`"ok"`)})
		b := make([]byte, len(want))
		if _, err := io.ReadFull(r, b); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("read %x, want %x", b, want)
		}
	})
	t.Run("no identity: any writable descriptor, as before", func(t *testing.T) {
		t.Setenv(EnvResultFD, dup(file))
		t.Setenv(EnvResultID, "")
		if _, err := Open(); err != nil {
			t.Fatal(err)
		}
	})
}
