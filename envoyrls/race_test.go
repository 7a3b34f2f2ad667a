//go:build race

package envoyrls_test

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts of pooled code (gostats' buffers) are not exact.
const raceEnabled = true
