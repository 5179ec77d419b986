package results

import (
	"encoding/json"
	"errors"
	"fmt"

	"tpurun/worker"
)

// decodeOutcome turns a result or error frame into a Result, checking its payload.
func decodeOutcome(rank, pid int, f worker.Frame) (Result, *ContractError) {
	res := Result{Replica: f.Replica, Rank: rank, PID: pid}
	bad := func(detail string) *ContractError {
		return &ContractError{Kind: ErrMalformedFrame, Replica: f.Replica, Rank: rank, PID: pid, OtherRank: -1,
			OtherPID: -1, Hint: hintMalformed,
			Message: fmt.Sprintf("rank %d pid %d sent a malformed %s frame for replica %d: %s", rank, pid, f.Kind, f.Replica, detail)}
	}
	switch f.Kind {
	case worker.KindResult:
		res.OK = true
		if f.Encoding == worker.EncodingPickle {
			res.Encoding, res.ValueB64 = "pickle", f.Payload
			return res, nil
		}
		if err := f.CheckJSON(); err != nil {
			ce := bad(fmt.Sprintf("its %d-byte payload is not valid JSON in UTF-8", len(f.Payload)))
			var huge *worker.HugeIntegerError
			if errors.As(err, &huge) { // valid JSON, but the results document would be unreadable in Python
				ce = bad(fmt.Sprintf("its JSON holds %v", huge))
				ce.Hint, ce.Cause = hintHugeInteger, huge
			}
			return res, ce
		}
		res.Encoding, res.Value = "json", f.Payload
	case worker.KindError:
		var info ErrorInfo
		if err := json.Unmarshal(f.Payload, &info); err != nil {
			return res, bad(fmt.Sprintf("its payload is not a JSON error {type, message, traceback}: %v", err))
		}
		if info.Type == "" && info.Message == "" {
			return res, bad("the error has neither a type nor a message")
		}
		res.Error = &info
	}
	return res, nil
}

// frameViolation names a decoding failure.
func frameViolation(rank, pid int, fe *worker.FrameError) *ContractError {
	ce := &ContractError{Replica: fe.Replica, Rank: rank, PID: pid, OtherRank: -1, OtherPID: -1, Cause: fe}
	switch {
	case errors.Is(fe, worker.ErrTooLarge):
		ce.Kind, ce.Hint = ErrOversizedFrame, hintOversized
		ce.Message = fmt.Sprintf("rank %d pid %d sent a %s frame of %d bytes for replica %d, over the limit of %d bytes (max result bytes); the frame was dropped",
			rank, pid, fe.Kind, fe.Length, fe.Replica, fe.Limit)
	case errors.Is(fe, worker.ErrUnknownVersion):
		ce.Kind, ce.Hint = ErrUnknownVersion, hintVersion
		ce.Message = fmt.Sprintf("rank %d pid %d sent a frame of protocol version %d at byte %d; this tpurun reads version %d",
			rank, pid, fe.Version, fe.Offset, worker.Version)
	case errors.Is(fe, worker.ErrTruncated):
		ce.Kind, ce.Hint = ErrTruncatedFrame, hintTruncated
		ce.Message = fmt.Sprintf("rank %d pid %d: its result channel ended in the middle of the frame at byte %d (%s)",
			rank, pid, fe.Offset, fe.Detail)
	default:
		ce.Kind, ce.Hint = ErrMalformedFrame, hintMalformed
		ce.Message = fmt.Sprintf("rank %d pid %d sent a malformed frame at byte %d: %s", rank, pid, fe.Offset, fe.Detail)
	}
	return ce
}
