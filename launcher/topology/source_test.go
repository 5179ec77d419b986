package topology

import "testing"

func TestDerivedFromNamesTheOriginalSourceOnce(t *testing.T) {
	s := DerivedFrom(DerivedFrom(Sysfs("/sys/bus/pci/devices")))
	if got, want := s.String(), "derived from sysfs /sys/bus/pci/devices"; got != want {
		t.Fatalf("DerivedFrom twice = %q, want %q", got, want)
	}
	if got, want := DerivedFrom(Env("TPU_ACCELERATOR_TYPE")).String(), "derived from env TPU_ACCELERATOR_TYPE"; got != want {
		t.Fatalf("DerivedFrom(env) = %q, want %q", got, want)
	}
}
