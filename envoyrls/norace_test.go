//go:build !race

package envoyrls_test

const raceEnabled = false
