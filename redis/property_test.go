package redis_test

import (
	"testing"

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
