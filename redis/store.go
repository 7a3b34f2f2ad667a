// Package redis is the sluice.Store that shares counters through Redis, so any
// number of instances of an API enforce one limit together. It runs on a single
// node, Sentinel or Cluster through github.com/redis/rueidis.
//
// Each check is ONE call of one Lua script (check.lua) over every limit's key:
// Redis runs a script atomically, so reading the counters, deciding and writing
// them cannot interleave with another check, whichever instance sent it. The
// script is sent by EVALSHA and re-sent by EVAL when Redis answers NOSCRIPT
// (after a restart or SCRIPT FLUSH), so a restarted Redis costs one extra round
// trip, not an outage. The clock is Redis's own TIME unless the request carries
// a time (tests), so instances with skewed clocks agree. Keys of one check share
// one hash tag, so the script runs on one Cluster node.
package redis

import (
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/scriptbatch"
)

//go:embed check.lua
var checkSource string

var checkScript = rueidis.NewLuaScript(checkSource)

// Options configure a Store.
type Options struct {
	// Prefix is put before every key, so several deployments can share one
	// Redis. Default "sluice:". It must not contain '{' or '}': Redis Cluster
	// would take a hash tag from it and put every counter on one node.
	Prefix string
	// MaxFlushDelay is how long a connection may hold its writes, after
	// flushing, to send the checks that arrive meanwhile in one write(2)
	// instead of one each (rueidis ClientOption.MaxFlushDelay). rueidis
	// applies it only while more than one command is in flight, so a lone
	// caller is never delayed. Zero means DefaultMaxFlushDelay; a negative
	// value disables it.
	MaxFlushDelay time.Duration
	// PipelineMultiplex sets the connections per Redis node to
	// 2^PipelineMultiplex (rueidis ClientOption.PipelineMultiplex, at most
	// 8); checks in flight are pipelined over them. Zero keeps rueidis's
	// default (two connections from GOMAXPROCS 2 on); a negative value means
	// one connection.
	PipelineMultiplex int
	// TLS, if set, is used on every connection, whatever the URL's scheme
	// (a rediss:// URL alone uses the system's CAs): a private CA, a client
	// certificate, a server name (see internal/tlsconfig.ClientConfig).
	TLS *tls.Config
	// ReplicaAcks, if above zero, makes every check that writes wait for
	// that many replicas to have its writes (WAIT, in the same round trip):
	// a check acknowledged by fewer within ReplicaAckTimeout fails as a
	// store failure, so a failover to a replica loses no admitted unit.
	// See replicas.go. Zero (the default) replicates asynchronously.
	ReplicaAcks int
	// ReplicaAckTimeout bounds each WAIT (default
	// DefaultReplicaAckTimeout); a call's own deadline bounds it too.
	ReplicaAckTimeout time.Duration
}

// DefaultMaxFlushDelay is the MaxFlushDelay of a zero Options, chosen by
// measurement: see the redis store section of BENCHMARKS.md.
const DefaultMaxFlushDelay = 20 * time.Microsecond

// Store is a sluice.Store on Redis. It is safe for concurrent use; concurrent
// checks are pipelined on shared connections by rueidis.
type Store struct {
	client rueidis.Client
	prefix string
	owned  bool
	slotState
	replicas replicas
	// commits batches replicated writes (see groupcommit.go); nil without
	// replica acks, and on a Cluster.
	commits *groupCommit
	// batches batches concurrent plain checks (see batch.go); nil on a
	// Cluster and with replica acks.
	batches *scriptbatch.Batcher[scriptCall, []rueidis.RedisMessage]
}

var _ sluice.Store = (*Store)(nil)

// Open connects to Redis at url:
//
//	redis://[user:password@]host:port[/db]            single node (rediss:// for TLS)
//	redis-cluster://host1:port,host2:port              Cluster, any reachable nodes
//	redis-sentinel://master@host1:26379,host2:26379[/db] Sentinel, master set name as user
//
// The returned Store owns the connection; Close it when done.
func Open(rawURL string, opts Options) (*Store, error) {
	clientOpts, err := clientOptions(rawURL, opts)
	if err != nil {
		return nil, err
	}
	s, err := dial(clientOpts, opts)
	if err != nil {
		return nil, fmt.Errorf("connect to redis at %s: %w", redactURL(rawURL), err)
	}
	return s, nil
}

// clientOptions checks opts and turns rawURL and opts into rueidis options:
// every configuration error is found here, before any connection.
func clientOptions(rawURL string, opts Options) (rueidis.ClientOption, error) {
	if strings.ContainsAny(opts.Prefix, "{}") {
		return rueidis.ClientOption{}, fmt.Errorf("redis key prefix %q must not contain '{' or '}': Redis Cluster would read a hash tag from it and keep every counter on one node", opts.Prefix)
	}
	if opts.PipelineMultiplex > rueidis.MaxPipelineMultiplex {
		return rueidis.ClientOption{}, fmt.Errorf("redis pipeline multiplex %d is more than %d (2^%d connections per node)", opts.PipelineMultiplex, rueidis.MaxPipelineMultiplex, rueidis.MaxPipelineMultiplex)
	}
	if opts.ReplicaAcks < 0 {
		return rueidis.ClientOption{}, fmt.Errorf("redis replica acks must be 0 (replicate asynchronously) or a number of replicas, got %d", opts.ReplicaAcks)
	}
	if opts.ReplicaAckTimeout < 0 {
		return rueidis.ClientOption{}, fmt.Errorf("redis replica ack timeout must not be negative, got %v", opts.ReplicaAckTimeout)
	}
	clientOpts, err := ParseURL(rawURL)
	if err != nil {
		return clientOpts, err
	}
	switch {
	case opts.MaxFlushDelay == 0:
		clientOpts.MaxFlushDelay = DefaultMaxFlushDelay
	case opts.MaxFlushDelay > 0:
		clientOpts.MaxFlushDelay = opts.MaxFlushDelay
	}
	clientOpts.PipelineMultiplex = opts.PipelineMultiplex
	if opts.TLS != nil {
		clientOpts.TLSConfig = opts.TLS.Clone()
	}
	return clientOpts, nil
}

// dial connects (rueidis dials at construction) and returns a Store that
// owns the connection.
func dial(clientOpts rueidis.ClientOption, opts Options) (*Store, error) {
	client, err := rueidis.NewClient(clientOpts)
	if err != nil {
		return nil, err
	}
	s := New(client, opts)
	s.owned = true
	return s, nil
}

// New returns a Store on an existing rueidis client, which the caller keeps
// owning.
func New(client rueidis.Client, opts Options) *Store {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = "sluice:"
	}
	s := &Store{client: client, prefix: prefix,
		replicas: replicas{acks: int64(max(opts.ReplicaAcks, 0)), timeout: opts.ReplicaAckTimeout}}
	if s.replicas.timeout <= 0 {
		s.replicas.timeout = DefaultReplicaAckTimeout
	}
	if client.Mode() == rueidis.ClientModeCluster {
		s.startSlotMap()
	} else if s.replicas.acks > 0 {
		s.commits = newGroupCommit(client, s.replicas.acks, s.replicas.timeout)
	} else {
		s.batches = newCheckBatcher(client)
	}
	return s
}

// ParseURL turns a Sluice Redis URL into rueidis options. See Open.
func ParseURL(rawURL string) (rueidis.ClientOption, error) {
	var opt rueidis.ClientOption
	u, err := url.Parse(rawURL)
	if err != nil {
		return opt, fmt.Errorf("redis URL %q is not a valid URL: %w", redactURL(rawURL), err)
	}
	switch u.Scheme {
	case "redis", "rediss":
		opt, err = rueidis.ParseURL(rawURL)
		if err != nil {
			return opt, fmt.Errorf("redis URL %q: %w", redactURL(rawURL), err)
		}
	case "redis-cluster", "redis-sentinel":
		hosts := strings.Split(u.Host, ",")
		for _, h := range hosts {
			if h == "" {
				return opt, fmt.Errorf("redis URL %q has an empty host in its list", redactURL(rawURL))
			}
			if _, _, err := splitHostPort(h); err != nil {
				return opt, fmt.Errorf("redis URL %q: host %q: %w", redactURL(rawURL), h, err)
			}
		}
		opt.InitAddress = hosts
		if u.Scheme == "redis-sentinel" {
			if u.User == nil || u.User.Username() == "" {
				return opt, fmt.Errorf("redis URL %q needs the master set name before '@' (redis-sentinel://mymaster@host:26379)", redactURL(rawURL))
			}
			opt.Sentinel.MasterSet = u.User.Username()
			if pw, ok := u.User.Password(); ok {
				opt.Password = pw
			}
			if db := strings.Trim(u.Path, "/"); db != "" {
				if opt.SelectDB, err = strconv.Atoi(db); err != nil {
					return opt, fmt.Errorf("redis URL %q: database %q is not a number", redactURL(rawURL), db)
				}
			}
		} else if u.User != nil {
			opt.Username = u.User.Username()
			opt.Password, _ = u.User.Password()
		}
	default:
		return opt, fmt.Errorf("redis URL %q: scheme must be redis, rediss, redis-cluster or redis-sentinel", redactURL(rawURL))
	}
	// Sluice reads no cached values; client-side caching would only add
	// tracking traffic.
	opt.DisableCache = true
	return opt, nil
}

func splitHostPort(h string) (string, int, error) {
	i := strings.LastIndexByte(h, ':')
	if i < 0 {
		return "", 0, errors.New("want host:port")
	}
	port, err := strconv.Atoi(h[i+1:])
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, errors.New("port must be a number from 1 to 65535")
	}
	return h[:i], port, nil
}

// redactURL hides a password so the URL can appear in errors and logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		if err != nil {
			return "(unparsable URL)"
		}
		return raw
	}
	return u.Redacted()
}

// Close closes the connection if Open made it.
func (s *Store) Close() error {
	s.stopSlotMap()
	if s.commits != nil {
		s.commits.close()
	}
	if s.owned {
		s.client.Close()
	}
	return nil
}

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Do(ctx, s.client.B().Ping().Build()).Error(); err != nil {
		return unavailable("ping", err)
	}
	return nil
}

// Check decides req in one script call. See sluice.Store.
func (s *Store) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	if err := req.Validate(); err != nil {
		return sluice.Decision{}, err
	}
	call := buildCall(s.prefix, req)
	var hold *sluice.Hold
	if req.Holds() {
		call, hold = s.withHold(call, req)
	}
	// A peek writes no count; a check that took nothing (a deny) changed
	// nothing a failover could lose.
	var reply []rueidis.RedisMessage
	var err error
	if s.batches != nil && batchable(req) {
		reply, err = s.batches.Do(ctx, call)
	} else {
		reply, err = s.execScript(ctx, call.keys, call.args, req.Cost > 0 || req.Holds(), checkAllowed)
	}
	if err != nil {
		return sluice.Decision{}, unavailable("check", err)
	}
	if len(reply) != 3+4*len(req.Limits) {
		return sluice.Decision{}, unavailable("check", fmt.Errorf("script replied %d values for %d limits", len(reply), len(req.Limits)))
	}
	for i := range 2 { // allowed and now: unused, but must read as numbers
		if _, err := replyInt(&reply[i]); err != nil {
			return sluice.Decision{}, unavailable("check", err)
		}
	}
	d := sluice.Decision{}
	if d.Limits, err = limitDecisions(reply[2:], req.Limits); err != nil {
		return sluice.Decision{}, unavailable("check", err)
	}
	if d.ExpiredLeases, err = replyInt(&reply[len(reply)-1]); err != nil {
		return sluice.Decision{}, unavailable("check", err)
	}
	d.Combine()
	if d.Allowed {
		d.Hold = hold
	}
	return d, nil
}

// limitDecisions decodes the script's four figures per limit (allowed,
// remaining, reset after and retry after in ms), which every reply that
// decides a check carries, starting at reply[0].
func limitDecisions(reply []rueidis.RedisMessage, limits []sluice.Limit) ([]sluice.LimitDecision, error) {
	out := make([]sluice.LimitDecision, len(limits))
	for i, l := range limits {
		var r [4]int64
		for j := range r {
			var err error
			if r[j], err = replyInt(&reply[4*i+j]); err != nil {
				return nil, err
			}
		}
		out[i] = sluice.LimitDecision{
			Name:       l.Name,
			Algorithm:  l.Algorithm,
			Allowed:    r[0] == 1,
			Limit:      l.DecisionLimit(),
			Remaining:  r[1],
			ResetAfter: time.Duration(r[2]) * time.Millisecond,
			RetryAfter: time.Duration(r[3]) * time.Millisecond,
			Window:     sluice.PolicyWindow(l),
		}
	}
	return out, nil
}

// checkAllowed reports whether a check's reply is an allow: what consumed.
func checkAllowed(reply []rueidis.RedisMessage) bool {
	if len(reply) == 0 {
		return true // malformed: judged as a write, then refused by Check
	}
	allowed, err := replyInt(&reply[0])
	return err != nil || allowed == 1
}

// replyInt reads one value of the script's reply as AsIntSlice would, without
// allocating the slice: an integer, a decimal string, or 0 for nil.
func replyInt(m *rueidis.RedisMessage) (int64, error) {
	if m.IsInt64() {
		return m.AsInt64()
	}
	if v, err := m.ToString(); err == nil && v != "" {
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, nil
}

// Reset deletes subject's counters for the given limits; a concurrency
// limit's leases stay until released, settled or expired.
func (s *Store) Reset(ctx context.Context, tenant, rule, subject string, limits []sluice.Limit) error {
	if err := sluice.Limits(limits).Validate(); err != nil {
		return err
	}
	keys := sluice.Keys(s.prefix, sluice.Request{Tenant: tenant, Rule: rule, Subject: subject, Limits: limits})
	// A concurrency limit's leases stand for work still running: they end
	// by release, settle or expiry, never by a reset.
	counters := keys[:0]
	for i, l := range limits {
		if l.Algorithm != sluice.AlgorithmConcurrency {
			counters = append(counters, keys[i])
		}
	}
	if len(counters) == 0 {
		return nil
	}
	// With the delete, check.lua bumps each counter's generation, so the
	// holds open now settle nothing into the fresh counters. The generation
	// outlives every hold open now (their records end within twice the
	// longest TTL), with the hour of slack an injected time may need.
	keep := (2*sluice.MaxHoldTTL + time.Hour).Milliseconds()
	counters = append(counters, generationKey(s.prefix, sluice.SubjectTag(tenant, rule, subject)))
	args := []string{"reset", strconv.FormatInt(keep, 10)}
	if _, err := s.execScript(ctx, counters, args, true, func([]rueidis.RedisMessage) bool { return true }); err != nil {
		return unavailable("reset", err)
	}
	return nil
}

// generationKey is the hash of (prefix, tag)'s counters' generations: how
// many resets each has had (see check.lua's reset).
func generationKey(prefix, tag string) string {
	return prefix + "{" + tag + "}:gen"
}

// unavailable wraps a Redis failure so callers can tell it from bad input and
// apply their failure policy, while keeping the cause (and context errors)
// visible to errors.Is.
func unavailable(op string, err error) error {
	return fmt.Errorf("redis %s: %w: %w", op, sluice.ErrStoreUnavailable, err)
}
