//go:build race

package rendezvous

// raceEnabled: the race detector's shadow memory inflates every allocation's footprint.
const raceEnabled = true
