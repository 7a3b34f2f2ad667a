package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/redis/rueidis"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/scriptbatch"
)

// envoyproxy/ratelimit keeps each fixed window's count in Redis under
//
//	CACHE_KEY_PREFIX + domain + "_" + (key + "_" + value + "_") per entry + window start
//
// (the window start in Unix seconds, a multiple of the unit's length), adds
// each request's hits with INCRBY and sets the key to expire with its unit.
// Sluice's own keys are hashed and hash-tagged, so during a rolling migration
// from one to the other, both services on one Redis would each admit up to
// the limit. With the ratelimit key format (Options.RatelimitKeys and a
// RatelimitKeyStore under the engine), Sluice counts its default fixed
// windows under those very keys, so the two fleets share one count.

// ratelimitKeyMarker starts the subject of a check counted under an
// envoyproxy/ratelimit key: no subject Match makes starts with a NUL.
// countAllMarker starts it instead when every hit counts (CountingEnvoy);
// what follows it up to the next NUL is the part of the hits above the
// limit (usually empty): the engine refuses a cost no limit can hold as
// bad input, so such a charge is checked at the limit and the rest rides
// in the subject, for the script to add.
const (
	ratelimitKeyMarker = "\x00ratelimit\x00"
	countAllMarker     = "\x00ratelimit+"
)

// keySubject is the subject of a matched descriptor's check: with the
// ratelimit key format and a rule it applies to, the key's descriptor part
// (envoyproxy/ratelimit's key without its prefix and window), else subject.
// countsAll says the check counts every hit (the domain's counting is
// envoy); then a cost above the limit is lowered to it, the rest carried in
// the subject. An all_or_nothing domain checks its descriptors together,
// under Sluice's keys: envoyproxy/ratelimit has no such thing to share
// counters with.
func (s *Server) keySubject(d *Domain, r *Rule, entries []*ratelimitv3.RateLimitDescriptor_Entry, subject string, cost *int64) (_ string, countsAll bool) {
	zero := s.countsZeroLimit(d, r)
	if !s.ratelimitKeys || d.AllOrNothing || !usesRatelimitKey(r) && !zero {
		return subject, false
	}
	var b strings.Builder
	if s.counting(d) == CountingEnvoy {
		countsAll = true
		b.WriteString(countAllMarker)
		capacity := r.Limit.Capacity
		if zero {
			capacity = 1 // the engine rule's stand-in
		}
		if over := *cost - capacity; over > 0 {
			b.WriteString(strconv.FormatInt(over, 10))
			*cost = capacity
		}
		b.WriteByte(0)
	} else {
		b.WriteString(ratelimitKeyMarker)
	}
	b.WriteString(d.Name)
	b.WriteByte('_')
	cur := d.root
	for _, e := range entries {
		next := cur.child(e.GetKey(), e.GetValue())
		if next == nil {
			return subject, false // cannot happen: entries matched r
		}
		b.WriteString(e.GetKey())
		b.WriteByte('_')
		if next.shareThreshold {
			// Every value the wildcard matches shares one counter, keyed
			// by the pattern, as there.
			b.WriteString(next.value) // the pattern as written, its * included
		} else {
			b.WriteString(e.GetValue())
		}
		b.WriteByte('_')
		cur = next
	}
	return b.String(), countsAll
}

// usesRatelimitKey reports whether r is counted as envoyproxy/ratelimit
// counts: a fixed window of one whole unit. Sluice's extensions (other
// algorithms, unit_multiplier, lease) keep Sluice's keys: there is nothing
// to share. A leased limit must: its leases are granted on Sluice's keys,
// and a direct check on other keys would count the same units twice over.
func usesRatelimitKey(r *Rule) bool {
	return r.Limit.Algorithm == sluice.AlgorithmFixedWindow && r.UnitMultiplier == 1 && r.Limit.Capacity > 0 &&
		r.Limit.Lease != sluice.LeaseAuto
}

// ratelimitScript counts checks under envoyproxy/ratelimit's keys, one key
// per check (a batch of concurrent checks in one call, see ratelimitBatcher).
// ARGV holds four per check: the counting ('s' strict: a deny consumes
// nothing, CountingStrict; 'a' every hit counts, as envoyproxy/ratelimit
// does, CountingEnvoy), the hits, the limit and the window in seconds. A
// strict check adds its hits unless that would pass the limit; a counting
// one adds them whatever the verdict, and is over the limit when the count
// with them passes it. Where envoyproxy/ratelimit counts denied hits too,
// the count is only higher. The reply is, per check, the verdict and the
// count.
//
// A key lives for its window from the hit that made it. envoyproxy/ratelimit
// sets the expiry on every hit; here the expiry is set once, in the same
// atomic step as the count that made the key, which saves Redis a command
// per check. (A key envoyproxy/ratelimit made and died before expiring is
// expired by its next hit there; its window's start is in the key, so such
// a key is never read again after the window.)
var ratelimitScript = rueidis.NewLuaScript(`
local out = {}
for i = 1, #KEYS do
  local a = (i - 1) * 4
  local key, hits, limit = KEYS[i], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local count, allowed, added
  if hits > 0 and ARGV[a + 1] == 'a' then
    count, added = redis.call('INCRBY', key, hits), true
    allowed = count <= limit
  else
    count = tonumber(redis.call('GET', key) or '0')
    allowed = count + hits <= limit
    if allowed and hits > 0 then
      count, added = redis.call('INCRBY', key, hits), true
    end
  end
  if added and count == hits then
    redis.call('EXPIRE', key, ARGV[a + 4])
  end
  out[2 * i - 1] = allowed and 1 or 0
  out[2 * i] = count
end
return out
`)

// ratelimitCall is one check's key and arguments of ratelimitScript.
type ratelimitCall struct {
	key  string
	args [4]string
}

// newRatelimitBatcher batches concurrent checks on client (see
// internal/scriptbatch): on a single Redis or a Sentinel's master only, as
// these keys have no hash tag and a Cluster would split them over slots.
func newRatelimitBatcher(client rueidis.Client) *scriptbatch.Batcher[ratelimitCall, [2]int64] {
	exec := func(ctx context.Context, calls []ratelimitCall) ([][2]int64, error) {
		keys := make([]string, len(calls))
		args := make([]string, 0, 4*len(calls))
		for i, c := range calls {
			keys[i] = c.key
			args = append(args, c.args[:]...)
		}
		reply, err := ratelimitScript.Exec(ctx, client, keys, args).AsIntSlice()
		if err == nil && len(reply) != 2*len(calls) {
			err = fmt.Errorf("script replied %d values for %d checks, want 2 each", len(reply), len(calls))
		}
		if err != nil {
			return nil, err
		}
		out := make([][2]int64, len(calls))
		for i := range out {
			out[i] = [2]int64{reply[2*i], reply[2*i+1]}
		}
		return out, nil
	}
	return &scriptbatch.Batcher[ratelimitCall, [2]int64]{Exec: exec,
		One: func(ctx context.Context, c ratelimitCall) ([2]int64, error) {
			reply, err := ratelimitScript.Exec(ctx, client, []string{c.key}, c.args[:]).AsIntSlice()
			if err == nil && len(reply) != 2 {
				err = fmt.Errorf("script replied %d values, want 2", len(reply))
			}
			if err != nil {
				return [2]int64{}, err
			}
			return [2]int64{reply[0], reply[1]}, nil
		}}
}

// RatelimitKeyStore is a sluice.Store that counts the checks the Envoy
// server marked (Options.RatelimitKeys) under envoyproxy/ratelimit's keys in
// Redis, and passes every other check to the store it wraps. Windows follow
// this process's clock, as envoyproxy/ratelimit's follow its own: the two
// must agree on the time to agree on the window.
//
// It passes the wrapped store's optional capabilities through too (see
// capabilities): holds, leases and top-ups are never of a marked check, so
// they are the wrapped store's alone.
type RatelimitKeyStore struct {
	capabilities
	next   sluice.Store
	client rueidis.Client
	prefix string
	now    func() time.Time
	// batches batches concurrent checks; on a Cluster it has no Exec, and
	// each check goes alone.
	batches *scriptbatch.Batcher[ratelimitCall, [2]int64]
}

var (
	_ sluice.Leaser      = (*RatelimitKeyStore)(nil)
	_ sluice.CreditStore = (*RatelimitKeyStore)(nil)
	_ sluice.Leaser      = (*ratelimitKeysOnceConnected)(nil)
	_ sluice.CreditStore = (*ratelimitKeysOnceConnected)(nil)
)

// NewRatelimitKeyStore wraps next; client is the Redis envoyproxy/ratelimit
// uses, and prefix its CACHE_KEY_PREFIX. The caller keeps owning client.
func NewRatelimitKeyStore(next sluice.Store, client rueidis.Client, prefix string) *RatelimitKeyStore {
	s := &RatelimitKeyStore{capabilities: capabilities{next}, next: next, client: client, prefix: prefix, now: time.Now}
	s.batches = newRatelimitBatcher(client)
	if client.Mode() == rueidis.ClientModeCluster {
		s.batches.Exec = nil
	}
	return s
}

// Check counts a marked check under its envoyproxy/ratelimit key, and passes
// any other to the wrapped store.
func (s *RatelimitKeyStore) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	counting, hits := "s", req.Cost
	descriptor, marked := strings.CutPrefix(req.Subject, ratelimitKeyMarker)
	if strings.HasPrefix(req.Subject, countAllMarker) {
		n, after, ok := parseCountAll(req.Subject)
		if !ok {
			return sluice.Decision{}, fmt.Errorf("%w: malformed envoyproxy/ratelimit-format subject", sluice.ErrInvalid)
		}
		counting, hits, descriptor, marked = "a", req.Cost+n, after, true
	}
	if !marked || !strings.HasPrefix(req.Tenant, "envoy:") || len(req.Limits) != 1 || req.Limits[0].Algorithm != sluice.AlgorithmFixedWindow {
		return s.next.Check(ctx, req)
	}
	if err := req.Validate(); err != nil {
		return sluice.Decision{}, err
	}
	l := req.Limits[0]
	unit := int64(l.Window / time.Second)
	if unit <= 0 {
		return sluice.Decision{}, fmt.Errorf("%w: a ratelimit-format window of %v is shorter than a second", sluice.ErrInvalid, l.Window)
	}
	now := req.Now
	if now.IsZero() {
		now = s.now()
	}
	start := now.Unix() / unit * unit
	untilEnd := time.Unix(start+unit, 0).Sub(now)
	key := s.prefix + descriptor + strconv.FormatInt(start, 10)
	call := ratelimitCall{key: key, args: [4]string{counting, strconv.FormatInt(hits, 10), strconv.FormatInt(l.Capacity, 10), strconv.FormatInt(unit, 10)}}
	var reply [2]int64
	var err error
	if s.batches.Exec != nil {
		reply, err = s.batches.Do(ctx, call)
	} else {
		reply, err = s.batches.One(ctx, call)
	}
	if err != nil {
		return sluice.Decision{}, fmt.Errorf("redis ratelimit-format check: %w: %w", sluice.ErrStoreUnavailable, err)
	}
	allowed := reply[0] == 1
	ld := sluice.LimitDecision{
		Name: l.Name, Algorithm: l.Algorithm, Allowed: allowed, Limit: l.Capacity,
		// envoyproxy/ratelimit counts denied hits too, so the count may be
		// past the limit.
		Remaining:  max(0, l.Capacity-reply[1]),
		ResetAfter: untilEnd,
		Window:     sluice.PolicyWindow(l),
	}
	if !allowed {
		// The count starts again at the next window, whoever counted.
		ld.RetryAfter = untilEnd
	}
	d := sluice.Decision{Limits: []sluice.LimitDecision{ld}}
	d.Combine()
	return d, nil
}

// Reset passes to the wrapped store: the Envoy face never resets a subject,
// and envoyproxy/ratelimit's keys expire with their window.
func (s *RatelimitKeyStore) Reset(ctx context.Context, tenant, rule, subject string, limits []sluice.Limit) error {
	return s.next.Reset(ctx, tenant, rule, subject, limits)
}

// RatelimitKeysOnceConnected is a RatelimitKeyStore over a Redis connection
// still being made: client returns nil until it is up. Meanwhile every
// check and reset of valid input fails at once as unavailable
// (sluice.ErrStoreConnecting), so the rules' failure modes answer.
func RatelimitKeysOnceConnected(next sluice.Store, client func() rueidis.Client, prefix string) sluice.Store {
	return &ratelimitKeysOnceConnected{capabilities: capabilities{next}, next: next, client: client, prefix: prefix}
}

type ratelimitKeysOnceConnected struct {
	// Holds, leases and top-ups go to next whether or not the ratelimit
	// connection is up: they never touch its keys.
	capabilities
	next   sluice.Store
	client func() rueidis.Client
	prefix string
	keys   atomic.Pointer[RatelimitKeyStore]
}

var errRatelimitKeysConnecting = fmt.Errorf("redis check: %w: %w: the connection of --envoy-key-format ratelimit is not up yet",
	sluice.ErrStoreUnavailable, sluice.ErrStoreConnecting)

func (r *ratelimitKeysOnceConnected) store() sluice.Store {
	if ks := r.keys.Load(); ks != nil {
		return ks
	}
	client := r.client()
	if client == nil {
		return nil
	}
	r.keys.CompareAndSwap(nil, NewRatelimitKeyStore(r.next, client, r.prefix))
	return r.keys.Load()
}

func (r *ratelimitKeysOnceConnected) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	s := r.store()
	if s == nil {
		if err := req.Validate(); err != nil {
			return sluice.Decision{}, err
		}
		return sluice.Decision{}, errRatelimitKeysConnecting
	}
	return s.Check(ctx, req)
}

func (r *ratelimitKeysOnceConnected) Reset(ctx context.Context, tenant, rule, subject string, limits []sluice.Limit) error {
	s := r.store()
	if s == nil {
		if err := sluice.Limits(limits).Validate(); err != nil {
			return err
		}
		return errRatelimitKeysConnecting
	}
	return s.Reset(ctx, tenant, rule, subject, limits)
}

// capabilities passes the optional interfaces the check engine and its
// guard look for (sluice.Holder, sluice.Leaser, sluice.CreditStore, a
// Ping, shards) to the wrapped store. The key format needs Redis, whose
// stores (redis.Store, redis.Connecting) have every one; with another
// store a call answers as a store without it would (its Unsupported
// error; one shard).
type capabilities struct{ next sluice.Store }

// Hold passes to the wrapped store. See sluice.Holder.
func (c capabilities) Hold(ctx context.Context, op sluice.HoldOp) (sluice.HoldResult, error) {
	h, ok := c.next.(sluice.Holder)
	if !ok {
		return sluice.HoldResult{}, sluice.ErrHoldsUnsupported
	}
	return h.Hold(ctx, op)
}

// Lease passes to the wrapped store. See sluice.Leaser. A marked subject
// (one counted under envoyproxy/ratelimit's keys) never leases: its units
// are not in the wrapped store's counters.
func (c capabilities) Lease(ctx context.Context, req sluice.LeaseRequest) (sluice.LeaseGrant, error) {
	if strings.HasPrefix(req.Subject, ratelimitKeyMarker) || strings.HasPrefix(req.Subject, countAllMarker) {
		return sluice.LeaseGrant{}, fmt.Errorf("%w: a check counted under envoyproxy/ratelimit's keys is checked directly, never leased", sluice.ErrInvalid)
	}
	l, ok := c.next.(sluice.Leaser)
	if !ok {
		return sluice.LeaseGrant{}, errNoLeases
	}
	return l.Lease(ctx, req)
}

// ReturnLease passes to the wrapped store. See sluice.Leaser.
func (c capabilities) ReturnLease(ctx context.Context, ret sluice.LeaseReturn) (sluice.LeaseReturnResult, error) {
	l, ok := c.next.(sluice.Leaser)
	if !ok {
		return sluice.LeaseReturnResult{}, errNoLeases
	}
	return l.ReturnLease(ctx, ret)
}

var errNoLeases = errors.New("the store does not lease quota")

// TopUp passes to the wrapped store. See sluice.CreditStore.
func (c capabilities) TopUp(ctx context.Context, t sluice.TopUp) (sluice.TopUpResult, error) {
	cs, ok := c.next.(sluice.CreditStore)
	if !ok {
		return sluice.TopUpResult{}, sluice.ErrCreditsUnsupported
	}
	return cs.TopUp(ctx, t)
}

// Ping is the wrapped store's liveness probe (every Redis store has one).
func (c capabilities) Ping(ctx context.Context) error {
	if p, ok := c.next.(interface{ Ping(context.Context) error }); ok {
		return p.Ping(ctx)
	}
	return nil
}

// Shards, Shard and ShardOfTag are the wrapped store's, so each shard of a
// Cluster keeps its own breaker.
func (c capabilities) Shards() int {
	if s, ok := c.next.(interface{ Shards() int }); ok {
		return s.Shards()
	}
	return 1
}

func (c capabilities) Shard(tenant, rule, subject string) int {
	if s, ok := c.next.(interface {
		Shard(tenant, rule, subject string) int
	}); ok {
		return s.Shard(tenant, rule, subject)
	}
	return 0
}

func (c capabilities) ShardOfTag(tag string) int {
	if s, ok := c.next.(interface{ ShardOfTag(string) int }); ok {
		return s.ShardOfTag(tag)
	}
	return 0
}

// KeyFormatSluice is the default of --envoy-key-format: Sluice's own keys.
const KeyFormatSluice = "sluice"

// CheckKeyFormat checks --envoy-key-format and --envoy-key-prefix before
// anything is opened: the format is sluice ("" too) or KeyFormatRatelimit, a
// prefix is envoyproxy/ratelimit's CACHE_KEY_PREFIX and belongs to that
// format only, and those keys live in Redis, so the format needs one.
func CheckKeyFormat(format, prefix string, haveRedis bool) error {
	switch format {
	case "", KeyFormatSluice:
		if prefix != "" {
			return errors.New("--envoy-key-prefix applies to --envoy-key-format ratelimit only")
		}
	case KeyFormatRatelimit:
		if !haveRedis {
			return errors.New("--envoy-key-format ratelimit shares counters with envoyproxy/ratelimit in Redis: set --redis too")
		}
	default:
		return fmt.Errorf("--envoy-key-format %q is not a key format; use sluice or ratelimit", format)
	}
	return nil
}
