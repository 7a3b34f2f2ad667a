package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

func open(t *testing.T, url string) *sluiceredis.Store {
	t.Helper()
	s, err := sluiceredis.Open(url, sluiceredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformanceSingleNode(t *testing.T) {
	srv := testenv.Redis(t)
	storetest.Run(t, func(t *testing.T) sluice.Store { return open(t, srv.URL()) })
}

func TestConformanceCluster(t *testing.T) {
	cluster := testenv.RedisCluster(t)
	storetest.Run(t, func(t *testing.T) sluice.Store { return open(t, cluster.URL()) })
}

func TestClusterSpreadsSubjectsOverNodes(t *testing.T) {
	cluster := testenv.RedisCluster(t)
	store := open(t, cluster.URL())
	limits := []sluice.Limit{sluice.TokenBucket(5, 1).Named("a"), sluice.SlidingWindow(5, time.Minute).Named("b")}
	for i := 0; i < 200; i++ {
		req := sluice.Request{Tenant: "t", Rule: "r", Subject: "user-" + strconv.Itoa(i), Limits: limits, Cost: 1}
		if _, err := store.Check(context.Background(), req); err != nil {
			t.Fatalf("subject %d: %v", i, err)
		}
	}
	for _, node := range cluster.Nodes {
		n, err := node.Do("DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		if n == "0" {
			t.Fatalf("node %s holds no keys: subjects are not spread over the cluster", node.Addr)
		}
	}
}

// TestScriptsSurviveRedisRestart: a restarted Redis has no scripts; the store
// must re-send the script (EVAL after NOSCRIPT) instead of failing.
func TestScriptsSurviveRedisRestart(t *testing.T) {
	srv := testenv.Redis(t)
	store := open(t, srv.URL())
	lim, _ := sluice.NewLimiter(store, "restart", sluice.TokenBucket(3, 1))
	ctx := context.Background()
	if _, err := lim.Allow(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	srv.FlushScripts()
	if _, err := lim.Allow(ctx, "s"); err != nil {
		t.Fatalf("after SCRIPT FLUSH: %v", err)
	}
	srv.Stop()
	if _, err := lim.Allow(ctx, "s"); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("with Redis down: want ErrStoreUnavailable, got %v", err)
	}
	srv.Start()
	testenv.Eventually(t, 10*time.Second, "checks succeed once Redis is back", func() bool {
		_, err := lim.Allow(ctx, "s")
		return err == nil
	})
}

// TestKeysExpireWhenNothingIsLost checks the TTL each algorithm sets on the
// server clock: exactly the time until dropping the key changes no decision.
func TestKeysExpireWhenNothingIsLost(t *testing.T) {
	srv := testenv.Redis(t)
	store := open(t, srv.URL())
	ctx := context.Background()
	cases := []struct {
		limit          sluice.Limit
		cost           int64
		minTTL, maxTTL int64 // ms
	}{
		// 4 of 10 tokens at 2/s: full again in 2s.
		{sluice.TokenBucket(10, 2).Named("tb"), 4, 1900, 2000},
		// The count weighs until the end of the next window.
		{sluice.SlidingWindow(10, time.Second).Named("sw"), 1, 1000, 2000},
		{sluice.FixedWindow(10, time.Second).Named("fw"), 1, 1, 1000},
	}
	for _, c := range cases {
		req := sluice.Request{Tenant: "ttl", Rule: "r", Subject: c.limit.Name, Limits: []sluice.Limit{c.limit}, Cost: c.cost}
		if _, err := store.Check(ctx, req); err != nil {
			t.Fatal(err)
		}
		got, err := srv.Do("PTTL", sluice.Keys("sluice:", req)[0])
		if err != nil {
			t.Fatal(err)
		}
		ttl, _ := strconv.ParseInt(got, 10, 64)
		if ttl < c.minTTL || ttl > c.maxTTL {
			t.Errorf("%s: PTTL %dms, want %d-%dms", c.limit, ttl, c.minTTL, c.maxTTL)
		}
	}
	// A peek writes nothing.
	req := sluice.Request{Tenant: "ttl", Rule: "r", Subject: "peek", Limits: []sluice.Limit{sluice.TokenBucket(1, 1).Named("p")}}
	if _, err := store.Check(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n, _ := srv.Do("EXISTS", sluice.Keys("sluice:", req)[0]); n != "0" {
		t.Fatalf("a peek created a key")
	}
}

// TestServerClockByDefault: without an injected time the script uses Redis
// TIME, so a bucket refills in real time.
func TestServerClockByDefault(t *testing.T) {
	srv := testenv.Redis(t)
	store := open(t, srv.URL())
	lim, _ := sluice.NewLimiter(store, "clock", sluice.TokenBucket(1, 20))
	ctx := context.Background()
	if d, _ := lim.Allow(ctx, "s"); !d.Allowed {
		t.Fatal("first check denied")
	}
	d, _ := lim.Allow(ctx, "s")
	if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 50*time.Millisecond {
		t.Fatalf("second check: %v, want denied for at most 50ms", d)
	}
	time.Sleep(d.RetryAfter + 5*time.Millisecond)
	if d, _ := lim.Allow(ctx, "s"); !d.Allowed {
		t.Fatalf("after waiting retry_after: %v", d)
	}
}

func TestPrefixSeparatesDeployments(t *testing.T) {
	srv := testenv.Redis(t)
	a, err := sluiceredis.Open(srv.URL(), sluiceredis.Options{Prefix: "a:"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := open(t, srv.URL())
	limits := []sluice.Limit{sluice.FixedWindow(1, time.Minute).Named("one")}
	req := sluice.Request{Tenant: "t", Rule: "r", Subject: "s", Limits: limits, Cost: 1}
	for _, s := range []sluice.Store{a, b} {
		if d, err := s.Check(context.Background(), req); err != nil || !d.Allowed {
			t.Fatalf("%v %v: prefixes do not separate counters", d, err)
		}
	}
}

// TestPrefixWithBracesIsRefused: a '{...}' in the prefix would be the hash
// tag of every key, putting all counters on one Cluster node.
func TestPrefixWithBracesIsRefused(t *testing.T) {
	for _, prefix := range []string{"{app}:", "a{", "b}"} {
		s, err := sluiceredis.Open("redis://127.0.0.1:1", sluiceredis.Options{Prefix: prefix})
		if err == nil {
			s.Close()
			t.Fatalf("prefix %q accepted", prefix)
		}
		if !contains(err.Error(), "hash tag") {
			t.Fatalf("prefix %q: unclear error %q", prefix, err)
		}
	}
}

func TestParseURL(t *testing.T) {
	valid := map[string]func(t *testing.T, addrs []string, master string, db int){
		"redis://127.0.0.1:6380/2": func(t *testing.T, addrs []string, master string, db int) {
			if len(addrs) != 1 || addrs[0] != "127.0.0.1:6380" || db != 2 {
				t.Fatalf("got %v db %d", addrs, db)
			}
		},
		"redis-cluster://h1:7000,h2:7001": func(t *testing.T, addrs []string, master string, db int) {
			if len(addrs) != 2 || addrs[1] != "h2:7001" {
				t.Fatalf("got %v", addrs)
			}
		},
		"redis-sentinel://mymaster@s1:26379,s2:26379/1": func(t *testing.T, addrs []string, master string, db int) {
			if len(addrs) != 2 || master != "mymaster" || db != 1 {
				t.Fatalf("got %v %q %d", addrs, master, db)
			}
		},
	}
	for url, check := range valid {
		opt, err := sluiceredis.ParseURL(url)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		check(t, opt.InitAddress, opt.Sentinel.MasterSet, opt.SelectDB)
	}
	invalid := []string{
		"http://h:6379",
		"redis-cluster://h1:7000,,h2:7001",
		"redis-cluster://h1",
		"redis-sentinel://s1:26379",
		"redis-sentinel://m@s1:26379/x",
		"redis://:secret@h:6379/zz",
	}
	for _, url := range invalid {
		_, err := sluiceredis.ParseURL(url)
		if err == nil {
			t.Errorf("%s: accepted", url)
			continue
		}
		if contains(err.Error(), "secret") {
			t.Errorf("%s: error reveals the password: %v", url, err)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestSentinelURL(t *testing.T) {
	master := testenv.Redis(t)
	sentinel := testenv.RedisSentinel(t, master, "mymaster")
	store := open(t, "redis-sentinel://mymaster@"+sentinel.Addr+"/0")
	lim, _ := sluice.NewLimiter(store, "sentinel", sluice.FixedWindow(1, time.Hour))
	if d, err := lim.Allow(context.Background(), "s"); err != nil || !d.Allowed {
		t.Fatalf("through sentinel: %v %v", d, err)
	}
	// The counter lives on the master the sentinel pointed to.
	if n, _ := master.Do("DBSIZE"); n != "1" {
		t.Fatalf("master holds %s keys, want 1", n)
	}
}

// TestShardFollowsClusterMasters: the guard keeps a breaker per shard, so a
// shard must be one master: subjects whose keys one master holds share a
// shard, and subjects on different masters never do.
func TestShardFollowsClusterMasters(t *testing.T) {
	cluster := testenv.RedisCluster(t)
	store := open(t, cluster.URL())
	if n := store.Shards(); n != 64 {
		t.Fatalf("a cluster store has %d shards, want 64", n)
	}
	limits := []sluice.Limit{sluice.FixedWindow(5, time.Minute).Named("m")}
	shardOfNode := map[string]int{}
	nodeOfShard := map[int]string{}
	for i := range 90 {
		subject := "user-" + strconv.Itoa(i)
		if _, err := store.Check(context.Background(), sluice.Request{Tenant: "t", Rule: "r", Subject: subject, Limits: limits, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		tag := sluice.SubjectTag("t", "r", subject)
		node := ""
		for _, n := range cluster.Nodes {
			keys, err := n.Do("KEYS", "*"+tag+"*")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(keys, tag) {
				node = n.Addr
			}
		}
		shard := store.Shard("t", "r", subject)
		if prev, ok := shardOfNode[node]; ok && prev != shard {
			t.Fatalf("subjects on node %s are in shards %d and %d", node, prev, shard)
		}
		if prev, ok := nodeOfShard[shard]; ok && prev != node {
			t.Fatalf("shard %d holds subjects of nodes %s and %s", shard, prev, node)
		}
		shardOfNode[node], nodeOfShard[shard] = shard, node
	}
	if len(shardOfNode) != 3 {
		t.Fatalf("subjects landed on %d nodes, want all 3", len(shardOfNode))
	}
	single := open(t, testenv.Redis(t).URL())
	if n, s := single.Shards(), single.Shard("t", "r", "x"); n != 1 || s != 0 {
		t.Fatalf("a single server has %d shards (shard %d), want 1 (0)", n, s)
	}
}
