package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/memory"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

func TestHoldsConformanceSingleNode(t *testing.T) {
	srv := testenv.Redis(t)
	storetest.RunHolds(t, func(t *testing.T) sluice.Holder { return open(t, srv.URL()) })
}

func TestHoldsConformanceCluster(t *testing.T) {
	cluster := testenv.RedisCluster(t)
	storetest.RunHolds(t, func(t *testing.T) sluice.Holder { return open(t, cluster.URL()) })
}

// Four clients over one Redis, as four instances of a service would be.
func TestStrictConcurrency(t *testing.T) {
	srv := testenv.Redis(t)
	var stores []sluice.Holder
	for range 4 {
		stores = append(stores, open(t, srv.URL()))
	}
	storetest.StrictConcurrency(t, stores, 300, 8)
}

func TestCrashedHoldersFreeAtTTL(t *testing.T) {
	srv := testenv.Redis(t)
	storetest.CrashedHolders(t, open(t, srv.URL()), 300*time.Millisecond)
}

// TestHoldsMatchModel: the model, the memory store, Redis and Redis Cluster
// answer every check, hold operation and reset alike, limits changing
// between reserve and settle included (2,000 sequences).
//
// 20 rounds of rapid's 100: judged by the memory store's coverage of its
// settle path (the same arithmetic as check.lua's), the rarest branch, a
// sliding window's refund into the previous-window slot, is missed by 28
// of 40 runs of 100 sequences, so 3 rounds (the old figure) missed it a
// third of the time, and 20 miss it about once in a thousand runs. Every
// other branch of the settle path is reached in at least 37 of 40 runs of
// 100. The deterministic conformance case holds that branch on every run
// anyway. 20 rounds take about 18 s, 40 s under -race, on the shared
// 2-core machine.
func TestHoldsMatchModel(t *testing.T) {
	mem := memory.New(memory.Options{})
	t.Cleanup(func() { mem.Close() })
	storetest.HoldsMatchModel(t, map[string]sluice.Holder{
		"memory":        mem,
		"redis":         open(t, testenv.Redis(t).URL()),
		"redis-cluster": open(t, testenv.RedisCluster(t).URL()),
	}, 20)
}

// BenchmarkHolds: an acquire/release pair next to a plain check, on a
// private local redis-server.
func BenchmarkHolds(b *testing.B) {
	srv := testenv.Redis(b)
	store, err := sluiceredis.Open(srv.URL(), sluiceredis.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	storetest.BenchmarkHolds(b, store)
}

// TestHoldRecordWithoutGenerationSettlesAsBefore: during a rolling upgrade
// a hold record written by a version without counter generations (no g
// fields) settles as that version did, across a reset too: its refund
// lowers the fresh count. A record with them drops it (the reset gave the
// estimate back). On a single Redis and a Cluster.
func TestHoldRecordWithoutGenerationSettlesAsBefore(t *testing.T) {
	for name, url := range map[string]string{"single": testenv.Redis(t).URL(), "cluster": testenv.RedisCluster(t).URL()} {
		t.Run(name, func(t *testing.T) {
			store := open(t, url)
			opt, err := sluiceredis.ParseURL(url)
			if err != nil {
				t.Fatal(err)
			}
			client, err := rueidis.NewClient(opt)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(client.Close)
			ctx := context.Background()
			limits := []sluice.Limit{sluice.FixedWindow(10, time.Hour).Named("w")}
			for _, old := range []bool{true, false} {
				subject := fmt.Sprintf("old-%v", old)
				check := func(cost int64, reserve bool) sluice.Decision {
					d, err := store.Check(ctx, sluice.Request{Tenant: "t", Rule: "r", Subject: subject, Limits: limits, Cost: cost, Reserve: reserve, Now: storetest.Base})
					if err != nil {
						t.Fatal(err)
					}
					return d
				}
				a := check(10, true)
				if old {
					tag, nonce, _ := sluice.SplitHoldID(a.Hold.ID)
					if err := client.Do(ctx, client.B().Hdel().Key(sluice.HoldKey("sluice:", tag, nonce)).Field("g1").Build()).Error(); err != nil {
						t.Fatal(err)
					}
				}
				if err := store.Reset(ctx, "t", "r", subject, limits); err != nil {
					t.Fatal(err)
				}
				// The generations outlive any hold open at the reset, and
				// then go: a reset leaves nothing for ever.
				gen := "sluice:{" + sluice.SubjectTag("t", "r", subject) + "}:gen"
				if ttl, err := client.Do(ctx, client.B().Pttl().Key(gen).Build()).AsInt64(); err != nil || ttl < (48*time.Hour).Milliseconds() || ttl > (49*time.Hour).Milliseconds() {
					t.Fatalf("generations' TTL %dms, %v; want 48h to 49h", ttl, err)
				}
				if d := check(10, false); !d.Allowed {
					t.Fatalf("after the reset: %v", d)
				}
				res, err := store.Hold(ctx, sluice.HoldOp{Tenant: "t", ID: a.Hold.ID, Action: sluice.HoldSettle, Cost: 0, Now: storetest.Base})
				if err != nil || res.Status != sluice.HoldSettled {
					t.Fatalf("settle: %+v %v", res, err)
				}
				if d := check(0, false); d.Remaining != map[bool]int64{true: 10, false: 0}[old] {
					t.Fatalf("record without generation %v: after the settle %v", old, d)
				}
			}
		})
	}
}
