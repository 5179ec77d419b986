package launcher

import (
	"encoding/json"
	"fmt"
	"os"
)

// maxErrorFile bounds how much of a TORCHELASTIC_ERROR_FILE is read.
const maxErrorFile = 1 << 20

// ErrorRecord is what PyTorch's @record wrote to TORCHELASTIC_ERROR_FILE on an uncaught exception.
type ErrorRecord struct {
	Message   string `json:"message"`
	Traceback string `json:"traceback,omitempty"`
	Timestamp string `json:"timestamp,omitempty"`
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

// readErrorFile reads and parses path; a missing file is (nil, nil).
func readErrorFile(path string) (*ErrorRecord, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, maxErrorFile)
	n, _ := f.Read(b)
	rec, err := ParseErrorFile(b[:n])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rec, nil
}
