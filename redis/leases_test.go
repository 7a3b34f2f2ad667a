package redis_test

import (
	"testing"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/memory"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

func TestLeasesConformanceSingleNode(t *testing.T) {
	srv := testenv.Redis(t)
	storetest.RunLeases(t, func(t *testing.T) sluice.Leaser { return open(t, srv.URL()) })
}

// Through Sentinel the store finds the master and runs the same script.
func TestLeasesConformanceSentinel(t *testing.T) {
	master := testenv.Redis(t)
	sentinel := testenv.RedisSentinel(t, master, "leases")
	storetest.RunLeases(t, func(t *testing.T) sluice.Leaser {
		return open(t, "redis-sentinel://leases@"+sentinel.Addr)
	})
}

// On a Cluster a lease's record and its subject's demands share the
// limits' hash tag, so the one script call runs on one node.
func TestLeasesConformanceCluster(t *testing.T) {
	cluster := testenv.RedisCluster(t)
	storetest.RunLeases(t, func(t *testing.T) sluice.Leaser { return open(t, cluster.URL()) })
}

// TestLeasesMatchModel: the model, the memory store, Redis and Redis
// Cluster answer every check, grant and return alike (500 sequences).
func TestLeasesMatchModel(t *testing.T) {
	mem := memory.New(memory.Options{})
	t.Cleanup(func() { mem.Close() })
	storetest.LeasesMatchModel(t, map[string]sluice.Leaser{
		"memory":        mem,
		"redis":         open(t, testenv.Redis(t).URL()),
		"redis-cluster": open(t, testenv.RedisCluster(t).URL()),
	}, 5)
}

// Two clients over one Redis, as two instances of a service would be,
// their holders granting and returning on one key.
func TestStrictLeases(t *testing.T) {
	srv := testenv.Redis(t)
	storetest.StrictLeases(t, []sluice.Leaser{open(t, srv.URL()), open(t, srv.URL())}, 64, 500)
}

// BenchmarkLeases: a lease of one unit and its return next to a plain
// check, on a private local redis-server.
func BenchmarkLeases(b *testing.B) {
	srv := testenv.Redis(b)
	store, err := sluiceredis.Open(srv.URL(), sluiceredis.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	storetest.BenchmarkLeases(b, store)
}
