package topology

import (
	"context"
	"errors"
	"testing"
)

func TestDerivedFromNamesTheOriginalSourceOnce(t *testing.T) {
	s := DerivedFrom(DerivedFrom(Sysfs("/sys/bus/pci/devices")))
	if got, want := s.String(), "derived from sysfs /sys/bus/pci/devices"; got != want {
		t.Fatalf("DerivedFrom twice = %q, want %q", got, want)
	}
	if got, want := DerivedFrom(Env("TPU_ACCELERATOR_TYPE")).String(), "derived from env TPU_ACCELERATOR_TYPE"; got != want {
		t.Fatalf("DerivedFrom(env) = %q, want %q", got, want)
	}
}

// TestConfigErrorNamesSourcesOnce: a derived source reads "derived from ...", never "from derived from ...", and a
// malformed value says so once.
func TestConfigErrorNamesSourcesOnce(t *testing.T) {
	t.Parallel()
	ft := newTree(t) // chips hidden from the container: the accelerator type describes them
	h, err := Detect(context.Background(), Options{Device: "tpu", LookupEnv: envOf(map[string]string{"TPU_ACCELERATOR_TYPE": "v4-8"}),
		SysfsRoot: ft.sys, DevRoot: ft.dev, MetadataURL: refusedURL(t)})
	must(t, err)
	for _, tc := range []struct {
		req  Request
		want string
	}{
		{Request{NProcs: 3}, "nprocs 3 is not a valid split of the 4 v4 chips on this host (derived from env TPU_ACCELERATOR_TYPE); use 1, 2 or 4, or leave it unset"},
		{Request{NProcs: 2, Hosts: []string{"a", "b"}}, "accelerator type v4-8 has 1 hosts but 2 are listed (from env TPU_ACCELERATOR_TYPE; derived from rendezvous); list every host of the slice, or fix the accelerator type"},
	} {
		if _, err := NewPlan(h, tc.req, World{}); !errors.Is(err, ErrConfig) || err.Error() != tc.want {
			t.Errorf("err =\n  %v\nwant\n  %s", err, tc.want)
		}
	}
	mixed := &ConfigError{Name: "nprocs", Value: "3", Problem: "is wrong", Sources: []Source{Flag("nprocs"), DerivedFrom(Env("TPU_ACCELERATOR_TYPE")), Flag("nprocs")}}
	if got, want := mixed.Error(), "nprocs 3 is wrong (from flag --nprocs; derived from env TPU_ACCELERATOR_TYPE)"; got != want {
		t.Errorf("mixed sources: %q, want %q", got, want)
	}

	ft8 := newTree(t).tpu(t, "0x0063", 8)
	_, err = Detect(context.Background(), Options{LookupEnv: envOf(map[string]string{"TPU_NUM_DEVICES": "abc"}), SysfsRoot: ft8.sys, DevRoot: ft8.dev, MetadataURL: refusedURL(t)})
	want := `TPU_NUM_DEVICES "abc" is malformed (from env TPU_NUM_DEVICES): "abc" is not a positive whole number; set it to the number of local chips to use (1, 2, 4 or all), or unset it`
	if !errors.Is(err, ErrParse) || !errors.Is(err, ErrConfig) || err.Error() != want {
		t.Errorf("err =\n  %v\nwant\n  %s", err, want)
	}
}
