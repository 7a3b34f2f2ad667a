package redis_test

import (
	"testing"
	"time"

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
