package launcher

import (
	"context"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/internal/spec"
)

// TestInternalCarriesEveryField: each field of the public Spec, set alone, changes the internal Spec it converts
// to: no setting a caller gives is dropped on the way in.
func TestInternalCarriesEveryField(t *testing.T) {
	var root Spec
	internal := func(s Spec) spec.Spec {
		is, err := s.internal(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return is
	}
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		for i := range v.NumField() {
			f, fv := v.Type().Field(i), v.Field(i)
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[zap.Logger]() {
				walk(path+f.Name+".", fv)
				continue
			}
			if f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct && f.Type != reflect.TypeFor[*os.File]() &&
				f.Type != reflect.TypeFor[*zap.Logger]() {
				fv.Set(reflect.New(f.Type.Elem()))
				walk(path+f.Name+".", fv.Elem())
				fv.SetZero()
				continue
			}
			if path+f.Name == "Rendezvous.SliceID" { // read only with NumSlices (see below)
				continue
			}
			before := internal(root)
			v := nonZero(t, path+f.Name, f.Type)
			if path+f.Name == "Rendezvous.Conf" {
				v = reflect.ValueOf([]string{"x=x"}) // an option is key=value
			}
			fv.Set(v)
			if got := internal(root); reflect.DeepEqual(got, before) {
				t.Errorf("%s%s: set alone, it changes nothing in the internal Spec", path, f.Name)
			}
			fv.SetZero()
		}
	}
	walk("", reflect.ValueOf(&root).Elem())
	slices := func(id int) int {
		s := Spec{
			Rendezvous: RendezvousSpec{NumSlices: 2, SliceID: id},
		}
		return internal(s).Rendezvous.SliceID
	}
	unset := internal(Spec{}).Rendezvous.SliceID
	if got := slices(1); got != 1 || unset != -1 {
		t.Errorf("SliceID 1 of 2 slices converts to %d, the zero one to %d; want 1, and -1 (from the environment)", got, unset)
	}
}

// nonZero is a value of type t that is not its zero value.
func nonZero(tb testing.TB, name string, t reflect.Type) reflect.Value {
	v := reflect.New(t).Elem()
	switch {
	case t == reflect.TypeFor[io.Writer]():
		v.Set(reflect.ValueOf(io.Discard))
	case t == reflect.TypeFor[*os.File]():
		v.Set(reflect.ValueOf(os.Stdin))
	case t == reflect.TypeFor[*zap.Logger]():
		v.Set(reflect.ValueOf(zap.NewNop()))
	case t == reflect.TypeFor[[]Observer]():
		v.Set(reflect.ValueOf([]Observer{ObserverFunc(func(Event) {})}))
	case t.Kind() == reflect.String:
		v.SetString("x")
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		v.SetInt(3)
	case t.Kind() == reflect.Bool:
		v.SetBool(true)
	case t.Kind() == reflect.Slice:
		v.Set(reflect.MakeSlice(t, 1, 1))
		v.Index(0).Set(nonZero(tb, name, t.Elem()))
	case t.Kind() == reflect.Map:
		v.Set(reflect.MakeMap(t))
		v.SetMapIndex(nonZero(tb, name, t.Key()), nonZero(tb, name, t.Elem()))
	case t.Kind() == reflect.Chan:
		v.Set(reflect.MakeChan(reflect.ChanOf(reflect.BothDir, t.Elem()), 0).Convert(t))
	default:
		tb.Fatalf("%s: no test value for %s", name, t)
	}
	return v
}

// TestEventKindsAgree: the public event kinds are the launcher's, number for number and name for name.
func TestEventKindsAgree(t *testing.T) {
	// String is the launcher's name for the number: each public constant must name itself
	for k, name := range map[EventKind]string{AttemptStarted: "AttemptStarted", WorkerFailed: "WorkerFailed",
		Sampled: "Sampled", ResultReceived: "ResultReceived", RendezvousDone: "RendezvousDone", AttemptEnded: "AttemptEnded"} {
		if got := k.String(); got != name {
			t.Errorf("kind %s is the launcher's %q", name, got)
		}
	}
	if got := spec.EventKind(AttemptEnded + 1).String(); got != "EventKind(7)" {
		t.Errorf("the launcher has a kind the public API lacks: %s", got)
	}
}

// TestDefaultsAgree: the defaults the public Spec documents are the ones the launcher fills in.
func TestDefaultsAgree(t *testing.T) {
	d, _, err := spec.Spec{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if d.Grace != DefaultGrace || d.MasterAddr != DefaultMasterAddr || d.Role != DefaultRole || d.DrainTimeout != DefaultDrainTimeout {
		t.Errorf("the launcher's defaults: grace %s, master %s, role %s, drain %s; the public ones: %s, %s, %s, %s",
			d.Grace, d.MasterAddr, d.Role, d.DrainTimeout, DefaultGrace, DefaultMasterAddr, DefaultRole, DefaultDrainTimeout)
	}
}

// TestExitCodeTableIsTheCLIs: ExitCode's documented table has the codes of tpurun's own table (failure.ExitTable), in
// its order, and the rows a library caller meets besides (a canceled context's 143).
func TestExitCodeTableIsTheCLIs(t *testing.T) {
	src, err := os.ReadFile("errors.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(src)[strings.Index(string(src), "// ExitCode is the exit code"):strings.Index(string(src), "func ExitCode(")]
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^//\t(\S+) `).FindAllStringSubmatch(doc, -1) {
		got = append(got, m[1])
	}
	var want []string
	for _, r := range failure.ExitTable {
		if r.Help != "" {
			want = append(want, r.Code)
		}
		if r.Code == "128+N" {
			want = append(want, "143")
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("ExitCode's table has the codes %v, want tpurun's %v", got, want)
	}
}
