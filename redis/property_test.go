package redis_test

import (
	"testing"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestMatchesModel requires the decisions of the reference model from Redis
// and Redis Cluster over random sequences (see storetest.MatchesModel; the
// memory store is held to the same in its own package, without Redis).
func TestMatchesModel(t *testing.T) {
	storetest.MatchesModel(t,
		storetest.NamedStore{Name: "redis", Store: open(t, testenv.Redis(t).URL())},
		storetest.NamedStore{Name: "redis-cluster", Store: open(t, testenv.RedisCluster(t).URL())})
}

// TestCreditsMatchModel holds credits and calendar windows on Redis and
// Redis Cluster to their reference model (see storetest.CreditsMatchModel).
func TestCreditsMatchModel(t *testing.T) {
	storetest.CreditsMatchModel(t,
		storetest.NamedStore{Name: "redis", Store: open(t, testenv.Redis(t).URL())},
		storetest.NamedStore{Name: "redis-cluster", Store: open(t, testenv.RedisCluster(t).URL())})
}

// TestCreditsNeverOverspend: 10,000 random-cost debits from 200 callers
// over two clients ("instances") of one Redis, and of one Cluster, end at
// exactly the initial balance plus top-ups minus what was admitted.
func TestCreditsNeverOverspend(t *testing.T) {
	for name, url := range map[string]string{"redis": testenv.Redis(t).URL(), "cluster": testenv.RedisCluster(t).URL()} {
		t.Run(name, func(t *testing.T) {
			storetest.CreditsNeverOverspend(t, []sluice.CreditStore{open(t, url), open(t, url)}, 200, 10_000)
		})
	}
}
