package redis_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestCreditsCheckIsOneRoundTrip: a check of a rule with a credits limit, a
// calendar window and a token bucket is one command on the server (one
// EVALSHA), allowed or denied, and so is a top-up.
func TestCreditsCheckIsOneRoundTrip(t *testing.T) {
	srv := testenv.Redis(t)
	store := open(t, srv.URL())
	limits := []sluice.Limit{
		sluice.Credits(sluice.Refill{Every: sluice.CalendarMonth, Amount: 5, Mode: sluice.RefillSet}),
		{Name: "daily", Algorithm: sluice.AlgorithmFixedWindow, Capacity: 100, Calendar: sluice.CalendarDay, TimeZone: "Europe/Berlin"},
		sluice.TokenBucket(100, 10).Named("burst"),
	}
	ctx := context.Background()
	// Load the script first: the EVAL a first NOSCRIPT costs is not a check's.
	if _, err := store.Check(ctx, sluice.Request{Tenant: "t", Rule: "r", Subject: "warm", Limits: limits}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	const checks = 10 // 5 allowed, then denied: no credits left
	for i := 0; i < checks; i++ {
		if _, err := store.Check(ctx, sluice.Request{Tenant: "t", Rule: "r", Subject: "s", Limits: limits, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.TopUp(ctx, sluice.TopUp{Tenant: "t", Rule: "r", Subject: "s", Limit: limits[0], Add: 3, IdempotencyKey: "k"}); err != nil {
		t.Fatal(err)
	}
	stats, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		calls[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	// Commands the script runs are counted too, and are not round trips:
	// what Sluice sent is EVALSHA, and HELLO if rueidis opened a connection.
	for _, inScript := range []string{"time", "hmget", "hset", "pexpire", "persist", "get", "set", "config|resetstat", "info", "hello"} {
		delete(calls, inScript)
	}
	if len(calls) != 1 || calls["evalsha"] != checks+1 {
		t.Fatalf("commands for %d checks and a top-up: %v; want evalsha=%d and nothing else", checks, calls, checks+1)
	}
}

// TestCreditsSentinel: through Sentinel the store finds the master and runs
// the same script: the credits and calendar conformance cases, and the
// concurrent debits over two clients.
func TestCreditsSentinel(t *testing.T) {
	master := testenv.Redis(t)
	sentinel := testenv.RedisSentinel(t, master, "credits")
	url := "redis-sentinel://credits@" + sentinel.Addr
	storetest.Run(t, func(t *testing.T) sluice.Store { return open(t, url) })
	storetest.CreditsNeverOverspend(t, []sluice.CreditStore{open(t, url), open(t, url)}, 200, 10_000)
}
