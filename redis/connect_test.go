package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// connect is Connect with the store closed when the test ends.
func connect(t *testing.T, url string) *sluiceredis.Connecting {
	t.Helper()
	c, err := sluiceredis.Connect(url, sluiceredis.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var connectReq = sluice.Request{Tenant: "t", Rule: "r", Subject: "s", Cost: 1,
	Limits: []sluice.Limit{sluice.FixedWindow(2, time.Hour).Named("hour")}}

// assertWaiting checks that every call fails at once, as unavailable and
// connecting, while bad input is still bad input.
func assertWaiting(t *testing.T, c *sluiceredis.Connecting) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	_, err := c.Check(ctx, connectReq)
	if !errors.Is(err, sluice.ErrStoreUnavailable) || !errors.Is(err, sluice.ErrStoreConnecting) {
		t.Fatalf("check before Redis answers: %v, want unavailable and connecting", err)
	}
	if err := c.Ping(ctx); !errors.Is(err, sluice.ErrStoreConnecting) {
		t.Fatalf("ping before Redis answers: %v", err)
	}
	if err := c.Reset(ctx, "t", "r", "s", connectReq.Limits); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("reset before Redis answers: %v", err)
	}
	if _, err := c.Hold(ctx, sluice.HoldOp{ID: sluice.NewHoldID("t", "r", "s"), Tenant: "t", Action: sluice.HoldRelease}); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("hold before Redis answers: %v", err)
	}
	bad := connectReq
	bad.Cost = 3
	if _, err := c.Check(ctx, bad); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("a cost that can never fit, before Redis answers: %v, want invalid input", err)
	}
	// "At once": nothing waits for a connection. The bound is far above
	// the few microseconds this takes, and far below a dial timeout.
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("calls before Redis answers took %v together", d)
	}
}

// assertDecidedByRedis waits until checks are Redis's, then checks that
// they count as Redis counts.
func assertDecidedByRedis(t *testing.T, c *sluiceredis.Connecting) {
	t.Helper()
	select {
	case <-c.Connected():
	case <-time.After(30 * time.Second):
		t.Fatal("the store did not connect within 30 s of Redis answering")
	}
	ctx := context.Background()
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping once connected: %v", err)
	}
	for i, want := range []bool{true, true, false} {
		d, err := c.Check(ctx, connectReq)
		if err != nil || d.Allowed != want {
			t.Fatalf("check %d once connected: %+v %v, want allowed=%v", i+1, d, err, want)
		}
	}
}

func TestConnectWaitsForRedis(t *testing.T) {
	srv := testenv.Redis(t)
	srv.Stop() // nothing listens on its port until Start
	c := connect(t, srv.URL())
	if n := c.Shards(); n != 1 {
		t.Errorf("single node: %d shards", n)
	}
	assertWaiting(t, c)
	srv.Start()
	assertDecidedByRedis(t, c)
}

func TestConnectWaitsForRedisCluster(t *testing.T) {
	cluster := testenv.RedisCluster(t)
	for _, n := range cluster.Nodes {
		n.Stop()
	}
	c := connect(t, cluster.URL())
	if n := c.Shards(); n <= 1 {
		t.Errorf("cluster: %d shards, want a breaker per master", n)
	}
	assertWaiting(t, c)
	for _, n := range cluster.Nodes {
		n.Start()
	}
	cluster.WaitOK()
	assertDecidedByRedis(t, c)
}

func TestConnectWaitsForSentinel(t *testing.T) {
	master := testenv.Redis(t)
	sentinel := testenv.RedisSentinel(t, master, "mymaster")
	sentinel.Stop()
	c := connect(t, "redis-sentinel://mymaster@"+sentinel.Addr+"/0")
	assertWaiting(t, c)
	sentinel.Start()
	assertDecidedByRedis(t, c)
}

func TestConnectAnswersAtOnceWhenRedisIsUp(t *testing.T) {
	srv := testenv.Redis(t)
	c := connect(t, srv.URL())
	select {
	case <-c.Connected():
	default:
		t.Fatal("Connect to a Redis that answers returned before connecting")
	}
	assertDecidedByRedis(t, c)
}

// TestConnectFailsAtOnceOnBadConfiguration: only unreachability is waited
// through; what waiting cannot mend fails the start with a clear message.
func TestConnectFailsAtOnceOnBadConfiguration(t *testing.T) {
	srv := testenv.Redis(t)
	for _, tc := range []struct {
		name, url string
		opts      sluiceredis.Options
		want      string
	}{
		{"unparsable URL", "redis://[::1", sluiceredis.Options{}, "not a valid URL"},
		{"unknown scheme", "http://" + srv.Addr, sluiceredis.Options{}, "scheme must be"},
		{"sentinel without a master name", "redis-sentinel://" + srv.Addr, sluiceredis.Options{}, "master set name"},
		{"prefix with a hash tag", srv.URL(), sluiceredis.Options{Prefix: "{x}"}, "must not contain"},
		{"negative replica acks", srv.URL(), sluiceredis.Options{ReplicaAcks: -1}, "replica acks must be 0"},
		{"negative replica ack timeout", srv.URL(), sluiceredis.Options{ReplicaAcks: 1, ReplicaAckTimeout: -time.Second}, "must not be negative"},
		{"user Redis refuses", "redis://nobody:wrong@" + srv.Addr + "/0", sluiceredis.Options{}, "refused the connection"},
		{"database Redis does not have", "redis://" + srv.Addr + "/999", sluiceredis.Options{}, "refused the connection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			c, err := sluiceredis.Connect(tc.url, tc.opts, nil)
			if err == nil {
				c.Close()
				t.Fatal("Connect accepted it")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v to fail", d)
			}
		})
	}
}

func TestConnectCloseStopsWaiting(t *testing.T) {
	srv := testenv.Redis(t)
	srv.Stop()
	c, err := sluiceredis.Connect(srv.URL(), sluiceredis.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not return while the store was waiting for Redis")
	}
	srv.Start()
	// Closed, it never connects.
	time.Sleep(connectRetryWindow)
	if err := c.Ping(context.Background()); !errors.Is(err, sluice.ErrStoreConnecting) {
		t.Errorf("a closed store connected: %v", err)
	}
}

// connectRetryWindow is longer than a few retries at the start of the
// backoff.
const connectRetryWindow = time.Second

// TestConnectingLeases: the store sluice serve opens leases (the engine
// leases only over a store that does, so without it serve never leased),
// and before it has connected a lease is unavailable, bad input still bad.
func TestConnectingLeases(t *testing.T) {
	srv := testenv.Redis(t)
	srv.Stop()
	c := connect(t, srv.URL())
	var leaser sluice.Store = c
	l, ok := leaser.(sluice.Leaser)
	if !ok {
		t.Fatal("Connecting does not lease")
	}
	ctx := context.Background()
	limits := []sluice.Limit{sluice.FixedWindow(10, time.Hour).Named("hour")}
	req := sluice.LeaseRequest{Tenant: "t", Rule: "r", Subject: "s", Limits: limits, Holder: "h", Want: 4, TTL: time.Minute}
	if _, err := l.Lease(ctx, req); !errors.Is(err, sluice.ErrStoreConnecting) {
		t.Fatalf("lease before Redis answers: %v", err)
	}
	bad := req
	bad.Want = 0
	if _, err := l.Lease(ctx, bad); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("bad lease before Redis answers: %v", err)
	}
	srv.Start()
	<-c.Connected()
	grant, err := l.Lease(ctx, req)
	if err != nil || grant.Granted != 4 {
		t.Fatalf("lease: %+v %v", grant, err)
	}
	res, err := l.ReturnLease(ctx, sluice.LeaseReturn{Tenant: "t", ID: grant.ID, Unused: 3})
	if err != nil || res.Status != sluice.LeaseReturned {
		t.Fatalf("return: %+v %v", res, err)
	}
	d, err := c.Check(ctx, sluice.Request{Tenant: "t", Rule: "r", Subject: "s", Limits: limits})
	if err != nil || d.Remaining != 9 {
		t.Fatalf("after a lease of 4 with 3 back: %+v %v, want 9 left", d, err)
	}
}

// TestConnectingTopsUp: the store sluice serve opens keeps credits (the
// engine tops up only a store that does, so without it serve's top-ups were
// refused), and before it has connected a top-up is unavailable, bad input
// still bad.
func TestConnectingTopsUp(t *testing.T) {
	srv := testenv.Redis(t)
	srv.Stop()
	c := connect(t, srv.URL())
	var store sluice.Store = c
	cs, ok := store.(sluice.CreditStore)
	if !ok {
		t.Fatal("Connecting keeps no credits")
	}
	ctx := context.Background()
	l := sluice.Credits(sluice.Refill{})
	up := sluice.TopUp{Tenant: "t", Rule: "r", Subject: "s", Limit: l, Add: 5, IdempotencyKey: "k1"}
	if _, err := cs.TopUp(ctx, up); !errors.Is(err, sluice.ErrStoreConnecting) {
		t.Fatalf("top-up before Redis answers: %v", err)
	}
	bad := up
	bad.Add = 0
	if _, err := cs.TopUp(ctx, bad); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("bad top-up before Redis answers: %v", err)
	}
	srv.Start()
	<-c.Connected()
	res, err := cs.TopUp(ctx, up)
	if err != nil || res.Balance != 5 || !res.Applied {
		t.Fatalf("top-up: %+v %v", res, err)
	}
}
