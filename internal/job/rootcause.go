package job

import (
	"encoding/json"
	"os"

	"go.uber.org/zap"

	"tpurun/internal/spec"
)

// copyRootCause does what torchrun's @record does in the launcher when a worker failed: when the launcher itself
// runs with a TORCHELASTIC_ERROR_FILE (a parent that launched it under its own @record), the failing rank's record
// is written there, with "errorCode" set to the rank's exit code, so the parent reports the real root cause. A
// failing rank that wrote no record leaves the file alone, as under torchrun.
func (j *job) copyRootCause(rep *spec.Report) {
	dst := spec.LookupEnv(j.spec.Env, "TORCHELASTIC_ERROR_FILE")
	a := rep.Last()
	if dst == "" || a == nil {
		return
	}
	s := a.Failed()
	if s == nil || s.Error == nil || len(s.Error.Raw()) == 0 {
		return
	}
	var doc map[string]any
	if err := json.Unmarshal(s.Error.Raw(), &doc); err != nil {
		return
	}
	if m, ok := doc["message"].(map[string]any); ok {
		m["errorCode"] = s.ExitCode
	}
	b, err := json.Marshal(doc)
	if err == nil {
		err = os.WriteFile(dst, b, 0o644)
	}
	if err != nil {
		j.log.Warn("could not copy the failing rank's error to the launcher's TORCHELASTIC_ERROR_FILE", zap.String("file", dst), zap.Error(err))
		return
	}
	j.log.Info("failing rank's error copied to the launcher's TORCHELASTIC_ERROR_FILE", zap.Int("rank", s.Rank), zap.String("file", dst))
}
