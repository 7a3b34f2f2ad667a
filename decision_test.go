package sluice_test

import (
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

func TestCeilMilliseconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{-time.Second: 0, 0: 0, time.Nanosecond: 1, time.Millisecond: 1, 1001 * time.Microsecond: 2} {
		if got := sluice.CeilMilliseconds(d); got != want {
			t.Errorf("%v: got %d, want %d", d, got, want)
		}
	}
}
