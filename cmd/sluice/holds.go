package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicelabs/sluice"
)

// parseConcurrency reads [NAME=]LIMIT/TTL, e.g. "10/30s" (at most 10 held at
// once, each lease freed after 30 seconds) or "uploads=3/10m".
func parseConcurrency(spec string) (sluice.Limit, error) {
	name, value := splitName(spec, string(sluice.AlgorithmConcurrency))
	bad := func(why string) error {
		return fmt.Errorf("--concurrency %q: %s; write [NAME=]LIMIT/TTL, e.g. 10/30s", spec, why)
	}
	limitText, ttlText, ok := strings.Cut(value, "/")
	if !ok {
		return sluice.Limit{}, bad("missing '/' between the limit and the lease ttl")
	}
	limit, err := strconv.ParseInt(limitText, 10, 64)
	if err != nil {
		return sluice.Limit{}, bad(fmt.Sprintf("limit %q is not a whole number", limitText))
	}
	ttl, err := parsePeriod(ttlText)
	if err != nil {
		return sluice.Limit{}, bad(err.Error())
	}
	l := sluice.Concurrency(limit, ttl).Named(name)
	if err := l.Validate(); err != nil {
		return sluice.Limit{}, fmt.Errorf("--concurrency %q: %w", spec, err)
	}
	return l, nil
}
