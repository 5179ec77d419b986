package proc_test

import (
	"fmt"
	"os"
	"testing"

	"tpurun/internal/proc"
	"tpurun/internal/testutil"
)

// The subreaper verb toggles its own process's subreaper flag and reports what IsSubreaper sees at each step.
func init() {
	testutil.Define(testutil.Verb{Name: "subreaper", Run: func(*testutil.Worker) int {
		steps := []bool{proc.IsSubreaper()}
		if err := proc.SetSubreaper(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		steps = append(steps, proc.IsSubreaper())
		if err := proc.ClearSubreaper(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(append(steps, proc.IsSubreaper()))
		return 0
	}})
}

// TestSubreaperToggles: a new process is no subreaper (the flag is not inherited), SetSubreaper makes it one,
// ClearSubreaper undoes it, and IsSubreaper sees each.
func TestSubreaperToggles(t *testing.T) {
	out, err := testutil.Command("subreaper").CombinedOutput()
	if err != nil || string(out) != "[false true false]\n" {
		t.Fatalf("%v: %s, want [false true false]", err, out)
	}
}
