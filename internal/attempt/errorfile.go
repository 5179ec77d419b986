package attempt

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"tpurun/internal/safepath"
)

// maxErrorFile bounds how much of a TORCHELASTIC_ERROR_FILE is read.
const maxErrorFile = 1 << 20

// ErrorRecord is what PyTorch's @record wrote to TORCHELASTIC_ERROR_FILE on an uncaught exception.
type ErrorRecord struct {
	Message   string `json:"message"`
	Traceback string `json:"traceback,omitempty"`
	Timestamp string `json:"timestamp,omitempty"`
	raw       []byte // the file as the worker wrote it
}

// ParseErrorFile parses the body of a TORCHELASTIC_ERROR_FILE:
// {"message": {"message": "...", "extraInfo": {"py_callstack": "...", "timestamp": "..."}}}; a plain string
// "message" is accepted too.
func ParseErrorFile(b []byte) (*ErrorRecord, error) {
	var doc struct {
		Message json.RawMessage `json:"message"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("error file is not JSON: %w", err)
	}
	if len(doc.Message) == 0 || string(doc.Message) == "null" {
		return nil, fmt.Errorf("error file has no \"message\" field")
	}
	var s string
	if err := json.Unmarshal(doc.Message, &s); err == nil {
		return &ErrorRecord{Message: s}, nil
	}
	var m struct {
		Message   string `json:"message"`
		ExtraInfo struct {
			PyCallstack string `json:"py_callstack"`
			Timestamp   string `json:"timestamp"`
		} `json:"extraInfo"`
	}
	if err := json.Unmarshal(doc.Message, &m); err != nil {
		return nil, fmt.Errorf("error file \"message\" is neither a string nor {message, extraInfo}: %w", err)
	}
	return &ErrorRecord{Message: m.Message, Traceback: m.ExtraInfo.PyCallstack, Timestamp: m.ExtraInfo.Timestamp}, nil
}

// Raw is the file as the worker wrote it (nil for a record not read from a file).
func (r *ErrorRecord) Raw() []byte { return r.raw }

// readErrorFile reads and parses path; a missing file is (nil, nil). The file is the worker's to write, so it is
// opened as a worker could have left it, without trusting it: without blocking (a FIFO put in its place would
// otherwise hold tpurun forever, deaf to signals), without following a symlink, and read only if it is a regular
// file, at most maxErrorFile bytes of it.
func readErrorFile(path string) (*ErrorRecord, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if errors.Is(err, unix.ELOOP) {
		return nil, &safepath.NotRegularError{Path: path, Mode: fs.ModeSymlink}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &safepath.NotRegularError{Path: path, Mode: st.Mode().Type()}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxErrorFile))
	if err != nil {
		return nil, err
	}
	rec, err := ParseErrorFile(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rec.raw = b
	return rec, nil
}
