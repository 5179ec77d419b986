package main

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

// TestSVGIsWellFormedXML: the chart must open in a browser or rsvg; an unescaped '&' in a legend did not.
func TestSVGIsWellFormedXML(t *testing.T) {
	svg := renderSVG([]launchPoint{
		{n: 1, tpurun: 10 * time.Millisecond, shell: 2 * time.Millisecond, torchrun: time.Second},
		{n: 256, tpurun: 250 * time.Millisecond, shell: 110 * time.Millisecond},
	})
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("renderSVG is not well-formed XML: %v\n%s", err, svg)
		}
	}
	for _, want := range []string{"tpurun", "torchrun", "N=256", "<polyline"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
}
