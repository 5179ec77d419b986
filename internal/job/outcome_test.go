package job

import (
	"encoding/json"
	"testing"
)

// FuzzVerdict: outcomes published by other nodes (untrusted JSON) never panic the verdict, and a verdict is
// always a failure.
func FuzzVerdict(f *testing.F) {
	for _, s := range []string{`[]`, `[{"node":0,"verdict":{"code":0}}]`, `[{"verdict":{"code":7,"reason":"failure"}},{"verdict":{"code":143,"reason":"remote"}}]`, `[{"verdict":{"code":-1}}]`,
		`[{"results":[{"replica":-5}]}]`, `[{"exits":[{"rank":1e99}]}]`, `null`, `[null]`, `{"a":1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var all []outcome
		if json.Unmarshal([]byte(s), &all) != nil {
			return
		}
		v, failed := worldVerdict(all)
		if failed && v.Code == 0 {
			t.Fatalf("verdict failed with code 0 from %s", s)
		}
	})
}
