package topology

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// fakeAccel is a kind that no file of the package has: TestKindIsOneFile registers it to show that a kind's file
// is all a new kind needs. Its cards are PCI functions of vendor 0xfa4e with /dev/fakeN nodes.
const fakeAccel Device = "fakeaccel"

const vendorFake = "0xfa4e"

type fakeKind struct{ perHost }

// fakeHost is the fake kind's detected state.
type fakeHost struct {
	Cards []Chip `json:"cards"`
}

func fakeState(h *Host) *fakeHost { return stateOf[fakeHost](h) }

func fakeCards(scan pciScan) []Chip {
	return scan.chips(func(f pciFunction) bool { return f.vendor == vendorFake })
}

func (fakeKind) Device() Device               { return fakeAccel }
func (fakeKind) PerCore() bool                { return false }
func (fakeKind) NCCL() bool                   { return false }
func (fakeKind) preference() int              { return 3 }
func (fakeKind) pjrt() []string               { return []string{"FAKEACCEL"} }
func (fakeKind) aliases() []string            { return []string{"fake"} }
func (fakeKind) devices(h *Host) []Chip       { return fakeState(h).Cards }
func (fakeKind) perRank() []string            { return []string{"FAKE_VISIBLE_CARD"} }
func (fakeKind) devNodeGlobs() []string       { return []string{"fake*"} }
func (fakeKind) usableNodes(h *Host) []string { return h.DevNodes() }
func (fakeKind) settings(h *Host) []Setting {
	return []Setting{{"fake cards", fmt.Sprint(len(fakeState(h).Cards)), Default()}}
}
func (fakeKind) probe(context.Context, *Host, Options, *zap.Logger) *Probe { return nil }

func (fakeKind) claim(_ *detector, scan pciScan) (Value[Device], bool) {
	if len(fakeCards(scan)) == 0 {
		return Value[Device]{}, false
	}
	return val(fakeAccel, Sysfs(scan.dir)), true
}

func (fakeKind) detect(_ context.Context, d *detector) error {
	scan, err := scanPCI(d.h.SysfsRoot)
	if err != nil {
		return err
	}
	cards := fakeCards(scan)
	for i, n := range numberedNodes(d.h.DevRoot, "fake") {
		if i < len(cards) {
			cards[i].DevNode = n
		}
	}
	d.h.state, d.h.ReplicasPerChip = &fakeHost{Cards: cards}, 1
	return nil
}

func (fakeKind) plan(h *Host, req Request) (*Plan, error) {
	n := len(fakeState(h).Cards)
	p := &Plan{Device: fakeAccel, Nodes: []Node{{Rank: 0, Host: "localhost", LocalWorkers: n}}}
	for i := range n {
		p.Workers = append(p.Workers, Worker{Rank: i, LocalRank: i, Replicas: []int{i},
			Env: map[string]string{"PJRT_DEVICE": "FAKEACCEL", "FAKE_VISIBLE_CARD": strconv.Itoa(i)}})
	}
	return p, nil
}

// registerForTest registers k for the test: a kind's file does it from init. The test must not be parallel.
func registerForTest(t *testing.T, k Kind) {
	t.Helper()
	before, names := slices.Clone(kinds), append([]string{string(k.Device())}, k.aliases()...)
	register(k)
	t.Cleanup(func() {
		kinds = before
		for _, n := range names {
			delete(byName, n)
		}
	})
}

// TestKindIsOneFile: a kind registered by one file (here, this test) is found by detection, chosen by --device and
// PJRT_DEVICE, plans its workers, keeps its own state on the host (shown by doctor and in JSON), names its per-rank
// variables and its device nodes for the preloaded interpreter, and its holders are checked: nothing else of the
// package names it.
func TestKindIsOneFile(t *testing.T) {
	registerForTest(t, fakeKind{})
	ft := newTree(t)
	ft.pci(t, vendorGoogle, "0x0063", "0x120000", 4, "vfio") // a TPU host too: the fake kind is preferred
	ft.pci(t, vendorFake, "0x0001", "0x120000", 2, "")
	for i := range 2 {
		must(t, os.WriteFile(filepath.Join(ft.dev, "fake"+strconv.Itoa(i)), nil, 0o644))
	}
	opts := Options{LookupEnv: envOf(nil), SysfsRoot: ft.sys, DevRoot: ft.dev, ProcRoot: t.TempDir()}
	h := checkFakeDetected(t, opts)
	p, err := NewPlan(h, Request{}, World{})
	if err != nil || len(p.Workers) != 2 || p.Workers[1].Env["FAKE_VISIBLE_CARD"] != "1" || p.Device != fakeAccel {
		t.Fatalf("plan %+v, %v: want the fake kind's two workers", p, err)
	}
	if !slices.Contains(PerRankEnv(), "FAKE_VISIBLE_CARD") || !slices.Contains(DeviceNodeGlobs(), "fake*") {
		t.Errorf("per-rank %v, device nodes %v: want the fake kind's", PerRankEnv(), DeviceNodeGlobs())
	}
	if !slices.Contains(Devices(), fakeAccel) || !slices.Contains(pjrtChoices(), "FAKEACCEL") {
		t.Errorf("devices %v, PJRT_DEVICE choices %v", Devices(), pjrtChoices())
	}
	checkFakeShown(t, h, opts)
}

// checkFakeDetected detects the fake host by itself (auto), by --device and by PJRT_DEVICE, and returns the first.
func checkFakeDetected(t *testing.T, opts Options) *Host {
	t.Helper()
	h, err := Detect(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(opts.DevRoot, "fake0"), filepath.Join(opts.DevRoot, "fake1")}; h.Device.V != fakeAccel || !slices.Equal(h.DevNodes(), want) {
		t.Fatalf("detected %s with nodes %v, want the fake kind's two cards", h.Device.V, h.DevNodes())
	}
	if err := h.CheckFree(); err != nil {
		t.Errorf("no process holds a fake card: %v", err)
	}
	for _, o := range []Options{{Device: "fake", LookupEnv: envOf(nil)}, {LookupEnv: envOf(map[string]string{"PJRT_DEVICE": "fakeaccel"})}} {
		o.SysfsRoot, o.DevRoot, o.ProcRoot = opts.SysfsRoot, opts.DevRoot, opts.ProcRoot
		if g, err := Detect(context.Background(), o, nil); err != nil || g.Device.V != fakeAccel {
			t.Errorf("%+v: device %v, %v", o, g, err)
		}
	}
	return h
}

// checkFakeShown checks that the host's JSON and doctor show the fake kind's state, and no TPU state.
func checkFakeShown(t *testing.T, h *Host, opts Options) {
	t.Helper()
	b, err := json.Marshal(h)
	if err != nil || !bytes.Contains(b, []byte(`"cards":[{"index":0,`)) || bytes.Contains(b, []byte(`"chips"`)) {
		t.Errorf("JSON %s, %v: want the fake state beside the host's fields and no TPU state", b, err)
	}
	doc := shown(h)
	for _, want := range []string{"fake cards", filepath.Join(opts.DevRoot, "fake1")} {
		if !strings.Contains(doc, want) {
			t.Errorf("doctor lacks %q:\n%s", want, doc)
		}
	}
}

// TestKindsFacts: the per-rank variables and the device nodes the launcher and the preloaded interpreter are
// handed are those each kind names: what workerenv and the preloaded interpreter had written down before the kinds owned them.
func TestKindsFacts(t *testing.T) {
	want := []string{"PJRT_LOCAL_PROCESS_RANK", "JAX_LOCAL_DEVICE_IDS", "JAX_PROCESS_ID", "JAX_NUM_PROCESSES",
		"TPU_VISIBLE_CHIPS", "TPU_PROCESS_PORT", "TPU_PROCESS_ADDRESSES", "CLOUD_TPU_TASK_ID"}
	if got := PerRankEnv(); !slices.Equal(got, want) {
		t.Errorf("per-rank env %v, want %v", got, want)
	}
	if got := DeviceNodeGlobs(); !slices.Equal(got, []string{"accel*", "vfio/*", "nvidia*"}) {
		t.Errorf("device node globs %v", got)
	}
	// The one TPU table: v2 and v3 share a PCI id, whose row is both; the testing id names no accelerator type.
	if d := pciDevices["0x0027"]; d.Name != "v2/v3" || d.ReplicasPerChip != 2 || d.DevNodes != "accel" {
		t.Errorf("0x0027: %+v", d)
	}
	if _, ok := families["test"]; ok || pciDevices["0x0056"].Name != "test" {
		t.Errorf("the testing chip: family %v, PCI %+v", families["test"], pciDevices["0x0056"])
	}
	for _, f := range tpuTable {
		if d := pciDevices[f.PCIID]; d.ReplicasPerChip != f.ReplicasPerChip || d.DevNodes != f.DevNodes {
			t.Errorf("%s: PCI row %+v disagrees with the table", f.Name, d)
		}
	}
}
