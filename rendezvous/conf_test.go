package rendezvous

import (
	"errors"
	"testing"
)

func TestParseConf(t *testing.T) {
	c, err := ParseConf("join_timeout=60, is_host=true")
	if err != nil || c["join_timeout"] != "60" || c["is_host"] != "true" {
		t.Fatalf("%v %v", c, err)
	}
	for _, in := range []string{"x", "=1", "a=1,a=2", "a=1,,b=2"} {
		if _, err := ParseConf(in); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: %v", in, err)
		}
	}
}
