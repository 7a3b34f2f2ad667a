package sluice

import (
	"strings"
	"testing"
	"time"
)

func TestParseWindow(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"500ms": 500 * time.Millisecond,
		"1s":    time.Second,
		"1m":    time.Minute,
		"1h30m": 90 * time.Minute,
		"1d":    24 * time.Hour,
		"1.5d":  36 * time.Hour,
		"1w":    7 * 24 * time.Hour,
		"1w2d":  9 * 24 * time.Hour,
		"2d12h": 60 * time.Hour,
		"90s":   90 * time.Second,
		"1m30s": 90 * time.Second,
		"250us": 250 * time.Microsecond,
	} {
		got, err := ParseWindow(in)
		if err != nil || got != want {
			t.Errorf("ParseWindow(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"":        "not a duration",
		"d":       "not a duration",
		"1":       "not a duration",
		"1x":      "not a duration",
		"-1d":     "not a duration",
		"1d-":     "not a duration",
		"1..5d":   "not a duration",
		"0s":      "not a positive duration",
		"0d":      "not a positive duration",
		"20000w":  "longer than the 292 years",
		" 1d":     "not a duration",
		"1 d":     "not a duration",
		"1day":    "not a duration",
		"1.5.5ms": "not a duration",
	} {
		if got, err := ParseWindow(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseWindow(%q) = %v, %v; want an error saying %q", in, got, err, why)
		}
	}
}

// FormatWindow's output reads back as the same window, so a catalog
// exported and applied again keeps its windows.
func TestFormatWindowReadsBack(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, 1500 * time.Millisecond, time.Minute, 90 * time.Minute, Day, Week, 30 * Day} {
		if got, err := ParseWindow(FormatWindow(d)); err != nil || got != d {
			t.Errorf("ParseWindow(FormatWindow(%v)) = %v, %v", d, got, err)
		}
	}
}
