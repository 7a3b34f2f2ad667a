package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicelabs/sluice"
)

// Backoff between connection attempts of a Connecting store: doubled after
// each failure, with jitter, up to the cap.
const (
	connectMinBackoff = 100 * time.Millisecond
	connectMaxBackoff = 5 * time.Second
	// connectReminder is how often a store still waiting for Redis says so
	// again, between its first warning and its connection.
	connectReminder = time.Minute
)

// Connecting is a Store that need not reach Redis to be made: a process
// started during a Redis outage starts anyway. Until it has connected, every
// call fails at once with an error wrapping sluice.ErrStoreUnavailable and
// sluice.ErrStoreConnecting, so the caller's failure policy answers, and a
// goroutine retries with capped exponential backoff. Once connected it is the
// Store Open returns, and rueidis reconnects on its own after that.
type Connecting struct {
	url        string // redacted, for logs and errors
	clientOpts rueidis.ClientOption
	opts       Options
	log        *slog.Logger
	shards     int

	store atomic.Pointer[Store]
	// since is when the store started waiting; last is the latest
	// attempt's error.
	since time.Time
	mu    sync.Mutex
	last  error

	stop      chan struct{}
	stopOnce  sync.Once
	done      chan struct{} // closed when the connecting goroutine ends
	connected chan struct{} // closed once connected
}

var (
	_ sluice.Store       = (*Connecting)(nil)
	_ sluice.Holder      = (*Connecting)(nil)
	_ sluice.Leaser      = (*Connecting)(nil)
	_ sluice.CreditStore = (*Connecting)(nil)
)

// Connect returns a Store on Redis at rawURL (see Open) that connects in the
// background when Redis does not answer now. A configuration error (an
// unparsable URL, a bad option) fails at once, and so does a Redis that
// answers but refuses the connection (a wrong password or database): only
// unreachability is waited through. log (nil: slog.Default()) gets one
// record when it starts waiting, a reminder every minute, and one when it
// connects. Close it when done.
func Connect(rawURL string, opts Options, log *slog.Logger) (*Connecting, error) {
	clientOpts, err := clientOptions(rawURL, opts)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	c := &Connecting{url: redactURL(rawURL), clientOpts: clientOpts, opts: opts, log: log, since: time.Now(),
		stop: make(chan struct{}), done: make(chan struct{}), connected: make(chan struct{})}
	// One attempt now: a Redis that answers at start is used at once, and
	// the store's shards are known before a guard asks for them.
	s, err := dial(clientOpts, opts)
	if err == nil {
		c.store.Store(s)
		c.shards = s.Shards()
		close(c.connected)
		close(c.done)
		return c, nil
	}
	if refused(err) {
		return nil, fmt.Errorf("connect to redis at %s: Redis answered but refused the connection (check the URL's credentials and database): %w", c.url, err)
	}
	// Not reachable yet: the shards follow the URL. A redis:// URL that
	// turns out to name a Cluster node gets one breaker for the Cluster.
	c.shards = 1
	if u, _ := url.Parse(rawURL); u != nil && u.Scheme == "redis-cluster" {
		c.shards = clusterShards
	}
	c.last = err
	log.Warn("Redis does not answer; starting without it: checks get their rules' failure modes until it does, and this instance keeps connecting in the background",
		"redis", c.url, "error", err, "retry_max_interval", connectMaxBackoff.String())
	go c.run()
	return c, nil
}

// refused reports an error Redis itself answered (WRONGPASS, NOAUTH, a
// database it does not have): waiting will not change it.
func refused(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && !re.IsNil()
}

// run connects with backoff until it succeeds or Close is called.
func (c *Connecting) run() {
	defer close(c.done)
	backoff := connectMinBackoff
	attempts := 1
	reminded := time.Now()
	for {
		// Full jitter on the upper half: instances started together do not
		// retry in step.
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-c.stop:
			return
		case <-time.After(wait):
		}
		s, err := dial(c.clientOpts, c.opts)
		attempts++
		if err == nil {
			c.store.Store(s)
			close(c.connected)
			c.log.Info("connected to Redis; checks are decided by it from now on", "redis", c.url,
				"waited", time.Since(c.since).Round(time.Millisecond).String(), "attempts", attempts)
			return
		}
		c.mu.Lock()
		c.last = err
		c.mu.Unlock()
		if time.Since(reminded) >= connectReminder {
			reminded = time.Now()
			level := slog.LevelWarn
			if refused(err) {
				level = slog.LevelError
			}
			c.log.Log(context.Background(), level, "still waiting for Redis; checks get their rules' failure modes", "redis", c.url,
				"error", err, "waited", time.Since(c.since).Round(time.Second).String(), "attempts", attempts)
		} else {
			c.log.Debug("Redis connection attempt failed", "redis", c.url, "error", err, "attempts", attempts)
		}
		backoff = min(backoff*2, connectMaxBackoff)
	}
}

// Connected is closed once the store has connected.
func (c *Connecting) Connected() <-chan struct{} { return c.connected }

// current is the connected Store, or the error every call answers with
// until there is one.
func (c *Connecting) current(op string) (*Store, error) {
	if s := c.store.Load(); s != nil {
		return s, nil
	}
	c.mu.Lock()
	last := c.last
	c.mu.Unlock()
	return nil, fmt.Errorf("redis %s: %w: %w: connecting in the background to %s for %s (last attempt: %v)", op,
		sluice.ErrStoreUnavailable, sluice.ErrStoreConnecting, c.url, time.Since(c.since).Round(time.Second), last)
}

// whenConnected is call on the connected Store. Until there is one, bad
// input is still answered as bad input (validate), connected or not, and
// anything else gets current's error.
func whenConnected[R any](c *Connecting, op string, validate func() error, call func(*Store) (R, error)) (R, error) {
	s, err := c.current(op)
	if err != nil {
		var zero R
		if verr := validate(); verr != nil {
			return zero, verr
		}
		return zero, err
	}
	return call(s)
}

// Check decides req once connected. See sluice.Store. (Not through
// whenConnected: the hot path keeps its closures out.)
func (c *Connecting) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	s, err := c.current("check")
	if err != nil {
		if verr := req.Validate(); verr != nil {
			return sluice.Decision{}, verr // bad input is bad input, connected or not
		}
		return sluice.Decision{}, err
	}
	return s.Check(ctx, req)
}

// Reset deletes subject's counters once connected. See Store.Reset.
func (c *Connecting) Reset(ctx context.Context, tenant, rule, subject string, limits []sluice.Limit) error {
	s, err := c.current("reset")
	if err != nil {
		if verr := sluice.Limits(limits).Validate(); verr != nil {
			return verr
		}
		return err
	}
	return s.Reset(ctx, tenant, rule, subject, limits)
}

// Hold settles, releases or extends a hold once connected. See
// sluice.Holder.
func (c *Connecting) Hold(ctx context.Context, op sluice.HoldOp) (sluice.HoldResult, error) {
	return whenConnected(c, "hold", op.Validate, func(s *Store) (sluice.HoldResult, error) { return s.Hold(ctx, op) })
}

// Lease grants a quota lease once connected. See sluice.Leaser. (Without
// it, sluice serve's store would not lease: the engine leases only over a
// store that does.)
func (c *Connecting) Lease(ctx context.Context, req sluice.LeaseRequest) (sluice.LeaseGrant, error) {
	return whenConnected(c, "lease", req.Validate, func(s *Store) (sluice.LeaseGrant, error) { return s.Lease(ctx, req) })
}

// ReturnLease gives back a lease's unused units once connected. See
// sluice.Leaser.
func (c *Connecting) ReturnLease(ctx context.Context, ret sluice.LeaseReturn) (sluice.LeaseReturnResult, error) {
	return whenConnected(c, "return lease", ret.Validate, func(s *Store) (sluice.LeaseReturnResult, error) { return s.ReturnLease(ctx, ret) })
}

// TopUp tops up a credits balance once connected. See sluice.CreditStore.
// (Without it, sluice serve's store kept no credits: the engine tops up
// only a store that does.)
func (c *Connecting) TopUp(ctx context.Context, t sluice.TopUp) (sluice.TopUpResult, error) {
	return whenConnected(c, "top up", t.Validate, func(s *Store) (sluice.TopUpResult, error) { return s.TopUp(ctx, t) })
}

// Ping checks that Redis answers; before the store has connected it fails
// with an error wrapping sluice.ErrStoreConnecting.
func (c *Connecting) Ping(ctx context.Context) error {
	s, err := c.current("ping")
	if err != nil {
		return err
	}
	return s.Ping(ctx)
}

// Shards is the Store's once connected at Connect; otherwise it follows
// the URL: up to 64 for redis-cluster://, else 1. It never changes.
func (c *Connecting) Shards() int { return c.shards }

// Shard is the Store's (see Store.Shard), 0 before it connects.
func (c *Connecting) Shard(tenant, rule, subject string) int {
	if s := c.store.Load(); s != nil && c.shards > 1 {
		return s.Shard(tenant, rule, subject)
	}
	return 0
}

// ShardOfTag is the Store's (see Store.ShardOfTag), 0 before it connects.
func (c *Connecting) ShardOfTag(tag string) int {
	if s := c.store.Load(); s != nil && c.shards > 1 {
		return s.ShardOfTag(tag)
	}
	return 0
}

// Close stops connecting (waiting for an attempt under way) and closes the
// connection if there is one.
func (c *Connecting) Close() error {
	c.stopOnce.Do(func() { close(c.stop) })
	<-c.done
	if s := c.store.Load(); s != nil {
		return s.Close()
	}
	return nil
}

// Client is the rueidis client of the connected Store, nil before it
// connects: for a caller that sends commands of its own on the same Redis.
// The store keeps owning it.
func (c *Connecting) Client() rueidis.Client {
	if s := c.store.Load(); s != nil {
		return s.client
	}
	return nil
}
