package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

func TestConcurrencyFlag(t *testing.T) {
	r, err := ruleFlags{route: "/upload*", concurrency: []string{"uploads=3/10m"}, tokenBuckets: []string{"10:2/s"}}.rule("acme", "up")
	if err != nil {
		t.Fatal(err)
	}
	want := sluice.Concurrency(3, 10*time.Minute).Named("uploads")
	if len(r.Limits) != 2 || r.Limits[1] != want {
		t.Fatalf("limits %+v, want the bucket and %+v", r.Limits, want)
	}
	for spec, wantErr := range map[string]string{
		"3":       "missing '/'",
		"x/30s":   "not a whole number",
		"3/soon":  "--concurrency",
		"0/30s":   "positive",
		"3/1500h": "at most 24h",
	} {
		_, err := parseConcurrency(spec)
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%q: %v, want an error containing %q", spec, err, wantErr)
		}
	}
}
