package failure_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"tpurun/internal/failure"
)

// tableCodes is the code column of failure.ExitTable.
func tableCodes() []string {
	var codes []string
	for _, r := range failure.ExitTable {
		codes = append(codes, r.Code)
	}
	return codes
}

// TestTableHasEveryCode: each named code, and the 141 of a closed stdout, has its row in the table.
func TestTableHasEveryCode(t *testing.T) {
	codes := tableCodes()
	for _, c := range []int{failure.ExitOK, failure.ExitReplicaError, failure.ExitUsage, failure.ExitResults, failure.ExitRendezvous,
		failure.ExitInternal, failure.ExitIOError, failure.ExitTimeout, failure.ExitNotExecutable, failure.ExitNotFound,
		failure.ExitSignal(syscall.SIGPIPE)} {
		if !slices.Contains(codes, strconv.Itoa(c)) {
			t.Errorf("exit code %d has no row in failure.ExitTable %q", c, codes)
		}
	}
	for _, r := range failure.ExitTable {
		if r.Help != "" && !strings.Contains(failure.ExitHelp, "  "+r.Code+" ") {
			t.Errorf("failure.ExitHelp lacks the row of %s:\n%s", r.Code, failure.ExitHelp)
		}
	}
}

// TestREADMETableIsTheTable: the README's "Exit codes" table lists the codes of failure.ExitTable, in its order, so
// that a code added to (or dropped from) one and not the other fails here. The README says more about each code
// than --help does; the codes are the fact held once.
func TestREADMETableIsTheTable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Exit codes\n")
	if !ok {
		t.Fatal(`README.md has no "## Exit codes" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var readme []string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "|") {
			continue
		}
		code := strings.ReplaceAll(strings.TrimSpace(cells[1]), "–", "-")
		if code == "code" || strings.Trim(code, "-") == "" {
			continue // the header and its rule
		}
		readme = append(readme, code)
	}
	if want := tableCodes(); !slices.Equal(readme, want) {
		t.Fatalf("README.md's exit codes %q, failure.ExitTable's %q: change both", readme, want)
	}
}
