package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// renderSVG draws launch time (log scale) against N for tpurun, the shell baseline and torchrun.
func renderSVG(points []launchPoint) string {
	const w, h, left, bottom, top, right = 640, 400, 70, 50, 30, 150
	series := []struct {
		name, color string
		get         func(launchPoint) time.Duration
	}{
		{"tpurun", "#1a73e8", func(p launchPoint) time.Duration { return p.tpurun }},
		{"shell (sh &amp;, wait)", "#5f6368", func(p launchPoint) time.Duration { return p.shell }},
		{"torchrun", "#d93025", func(p launchPoint) time.Duration { return p.torchrun }},
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range points {
		for _, s := range series {
			if v := s.get(p).Seconds() * 1000; v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	x := func(i int) float64 { return left + float64(i)*float64(w-left-right)/float64(max(1, len(points)-1)) }
	y := func(v float64) float64 {
		return float64(h-bottom) - (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*float64(h-bottom-top)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14">Start and reap N trivial workers (median, ms, log scale)</text>`+"\n", left)
	for v := lo; v <= hi*1.001; v *= 10 {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n",
			left, w-right, y(v), y(v), left-6, y(v)+4, v)
	}
	for i, p := range points {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">N=%d</text>`+"\n", x(i), h-bottom+18, p.n)
	}
	for k, s := range series {
		var pts []string
		for i, p := range points {
			if v := s.get(p).Seconds() * 1000; v > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x(i), y(v), s.color)
			}
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			w-right+15, top+20*k, s.color, w-right+32, top+20*k+11, s.name)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
