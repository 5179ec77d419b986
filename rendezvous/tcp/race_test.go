//go:build race

package tcp

// raceEnabled: the race detector's shadow memory inflates every allocation's footprint.
const raceEnabled = true
