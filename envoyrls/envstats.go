package envoyrls

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	gostats "github.com/lyft/gostats"
)

// EnvStats counts what envoyproxy/ratelimit counts, under its stat names,
// for the dashboards and alerts of a fleet that moves to Sluice:
//
//	ratelimit.service.rate_limit.<domain>.<key>.total_hits      hits of the rule's descriptors
//	ratelimit.service.rate_limit.<domain>.<key>.within_limit    hits allowed
//	ratelimit.service.rate_limit.<domain>.<key>.near_limit      hits past NearLimitRatio of the limit
//	ratelimit.service.rate_limit.<domain>.<key>.over_limit      hits past the limit
//	ratelimit.service.rate_limit.<domain>.<key>.over_limit_with_local_cache  of those, denied by the deny cache
//	ratelimit.service.rate_limit.<domain>.<key>.shadow_mode     hits past the limit let through by shadow_mode
//	ratelimit.service.rate_limit.<domain>.domain_not_found      descriptors of a domain no file defines
//	ratelimit.service.call.should_rate_limit.redis_error        calls the store failed
//	ratelimit.service.call.should_rate_limit.service_error      calls refused for their input or state
//	ratelimit.service.config_load_success, config_load_error    configuration loads
//	ratelimit.service.global_shadow_mode                        calls over the limit answered OK by --envoy-shadow
//	ratelimit_server.ShouldRateLimit.total_requests, response_time (ms)
//
// <key> is the rule's key as /rlconfig prints it ("key_value.key2"), with
// ':' and '|' turned into '_', and the dots of IPv4 addresses too, as
// there. The counters are gostats' (the library envoyproxy/ratelimit
// flushes with), made once per rule when a configuration is compiled, so a
// check only adds to atomic counters; they go to the sinks every flush
// interval, as deltas. A nil *EnvStats counts nothing.
type EnvStats struct {
	store     gostats.Store
	rules     gostats.Scope // ratelimit.service.rate_limit
	nearRatio float32
	stop      chan struct{}
	done      chan struct{}
	closers   []func() error
	closeOnce sync.Once
	prom      *prometheusSink

	configLoadSuccess, configLoadError, globalShadow gostats.Counter
	redisError, serviceError                         gostats.Counter
	totalRequests                                    gostats.Counter
	responseTime                                     gostats.Timer

	unknownMu sync.Mutex
	unknown   map[string]gostats.Counter
	// keys are the counters of keys made from a request's values (limit
	// overrides), bounded by maxDynamicKeys.
	keysMu sync.Mutex
	keys   map[string]*ruleStats
}

// EnvStatsOptions configure EnvStats. With neither StatsdAddr nor
// PrometheusAddr there is nothing to send to, and NewEnvStats returns nil.
type EnvStatsOptions struct {
	// StatsdAddr is host:port of a statsd server (STATSD_HOST,
	// STATSD_PORT), "" for none; StatsdProtocol is "udp" (the default) or
	// "tcp" (gostats' STATSD_PROTOCOL, whose default envoyproxy/ratelimit
	// inherits).
	StatsdAddr, StatsdProtocol string
	// PrometheusAddr serves the stats as Prometheus series, mapped by
	// PrometheusMapper (a statsd_exporter mapping file, "" for
	// envoyproxy/ratelimit's default), at PrometheusPath ("/metrics").
	PrometheusAddr, PrometheusPath, PrometheusMapper string
	// PrometheusResponseTimeMillis keeps the default mapping's
	// ratelimit_service_response_time_seconds in milliseconds, as
	// envoyproxy/ratelimit's PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS (not
	// applied to a mapping file).
	PrometheusResponseTimeMillis bool
	// FlushInterval is how often counters go out (STATS_FLUSH_INTERVAL);
	// default 10s.
	FlushInterval time.Duration
	// Tags are added to every stat, in gostats' form "name.__key=value",
	// '.', ':' and '|' in them turned into '_' (EXTRA_TAGS).
	Tags map[string]string
	// NearLimitRatio is the share of a limit past which hits count as
	// near_limit (NEAR_LIMIT_RATIO); default 0.8.
	NearLimitRatio float64
	// Logger receives the sinks' errors; slog.Default() when nil.
	Logger *slog.Logger
}

// DefaultStatsFlushInterval is envoyproxy/ratelimit's STATS_FLUSH_INTERVAL.
const DefaultStatsFlushInterval = 10 * time.Second

// DefaultNearLimitRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO.
const DefaultNearLimitRatio = 0.8

// maxUnknownDomains bounds the domain_not_found counters, one per domain
// name a client sent: the names are the client's to choose.
const maxUnknownDomains = 1024

// maxDynamicKeys bounds the counters of keys made from request values:
// past it, new keys are not counted.
const maxDynamicKeys = 10_000

// NewEnvStats checks opts, opens the sinks (the Prometheus listener is
// bound before it returns, a mapping file read and checked) and starts
// flushing. Close flushes once more and stops.
func NewEnvStats(opts EnvStatsOptions) (*EnvStats, error) {
	if opts.StatsdAddr == "" && opts.PrometheusAddr == "" {
		return nil, nil
	}
	if opts.FlushInterval == 0 {
		opts.FlushInterval = DefaultStatsFlushInterval
	}
	if opts.FlushInterval < 0 {
		return nil, fmt.Errorf("the stats flush interval must be positive, got %v", opts.FlushInterval)
	}
	if opts.NearLimitRatio == 0 {
		opts.NearLimitRatio = DefaultNearLimitRatio
	}
	if opts.NearLimitRatio < 0 || opts.NearLimitRatio > 1 || math.IsNaN(opts.NearLimitRatio) {
		return nil, fmt.Errorf("the near-limit ratio must be between 0 and 1, got %v", opts.NearLimitRatio)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	var sinks multiSink
	e := &EnvStats{nearRatio: float32(opts.NearLimitRatio), stop: make(chan struct{}), done: make(chan struct{}), unknown: map[string]gostats.Counter{}, keys: map[string]*ruleStats{}}
	if opts.StatsdAddr != "" {
		sink, err := newStatsdSink(opts.StatsdAddr, opts.StatsdProtocol, log)
		if err != nil {
			return nil, err
		}
		sinks = append(sinks, sink)
	}
	if opts.PrometheusAddr != "" {
		sink, err := newPrometheusSink(opts, log)
		if err != nil {
			return nil, err
		}
		sinks = append(sinks, sink)
		e.prom = sink
		e.closers = append(e.closers, sink.Close)
	}
	var sink gostats.Sink = sinks
	if len(sinks) == 1 {
		sink = sinks[0]
	}
	e.store = gostats.NewStore(sink, false)
	service := e.store.ScopeWithTags("ratelimit", opts.Tags).Scope("service")
	e.rules = service.Scope("rate_limit")
	e.configLoadSuccess = service.NewCounter("config_load_success")
	e.configLoadError = service.NewCounter("config_load_error")
	e.globalShadow = service.NewCounter("global_shadow_mode")
	call := service.Scope("call.should_rate_limit")
	e.redisError = call.NewCounter("redis_error")
	e.serviceError = call.NewCounter("service_error")
	server := e.store.ScopeWithTags("ratelimit_server", opts.Tags)
	e.totalRequests = server.NewCounter("ShouldRateLimit.total_requests")
	e.responseTime = server.NewTimer("ShouldRateLimit.response_time")
	go e.run(opts.FlushInterval)
	return e, nil
}

func (e *EnvStats) run(interval time.Duration) {
	defer close(e.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			e.store.Flush()
		case <-e.stop:
			e.store.Flush()
			return
		}
	}
}

// Flush sends the counters now (tests; Close does it too).
func (e *EnvStats) Flush() {
	if e != nil {
		e.store.Flush()
	}
}

// Close flushes the counters a last time and closes the sinks.
func (e *EnvStats) Close() error {
	if e == nil {
		return nil
	}
	var errs []error
	e.closeOnce.Do(func() {
		close(e.stop)
		<-e.done
		for _, c := range e.closers {
			errs = append(errs, c())
		}
	})
	return errors.Join(errs...)
}

// ruleStats are one rule's counters.
type ruleStats struct {
	totalHits, withinLimit, nearLimit, overLimit, overLimitLocal, shadowMode gostats.Counter
}

// ruleStats makes (or finds: a reloaded rule keeps its counters) the
// counters of the rule whose /rlconfig key is fullKey.
func (e *EnvStats) ruleStats(fullKey string) *ruleStats {
	if e == nil {
		return nil
	}
	key := SanitizeStatName(fullKey)
	return &ruleStats{
		totalHits:      e.rules.NewCounter(key + ".total_hits"),
		withinLimit:    e.rules.NewCounter(key + ".within_limit"),
		nearLimit:      e.rules.NewCounter(key + ".near_limit"),
		overLimit:      e.rules.NewCounter(key + ".over_limit"),
		overLimitLocal: e.rules.NewCounter(key + ".over_limit_with_local_cache"),
		shadowMode:     e.rules.NewCounter(key + ".shadow_mode"),
	}
}

// keyStats are the counters of a key made from a request's values, as
// envoyproxy/ratelimit names a limit override's: "domain.key_value.key2".
// nil past maxDynamicKeys.
func (e *EnvStats) keyStats(key string) *ruleStats {
	if e == nil {
		return nil
	}
	e.keysMu.Lock()
	defer e.keysMu.Unlock()
	rs, ok := e.keys[key]
	if !ok && len(e.keys) < maxDynamicKeys {
		rs = e.ruleStats(key)
		e.keys[key] = rs
	}
	return rs
}

// descriptorKey is envoyproxy/ratelimit's key of a descriptor with a limit
// override: the domain, then each entry's key, "_value" when it has one.
func descriptorKey(domain string, desc *ratelimitv3.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range desc.GetEntries() {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		if e.GetValue() != "" {
			b.WriteByte('_')
			b.WriteString(e.GetValue())
		}
	}
	return b.String()
}

// detailedMetricKey is envoyproxy/ratelimit's key of a descriptor whose
// rule has detailed_metric: the domain, then each entry's key and value
// joined by "_" (an empty value leaves the "_").
func detailedMetricKey(domain string, desc *ratelimitv3.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range desc.GetEntries() {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		b.WriteByte('_')
		b.WriteString(e.GetValue())
	}
	return b.String()
}

// decided counts one descriptor's decision as envoyproxy/ratelimit's
// base limiter does: the window's count before and after this hit decide
// how many of the hits were within, near or over the limit. Sluice's
// decision gives the count after an allowed hit (limit - remaining) and
// the count before a denied one (a deny consumes nothing); under
// CountingEnvoy a deny leaves no figure below the limit, so the hits of the
// one call that crosses it all count as over_limit. cached says the deny
// cache answered (envoyproxy/ratelimit's local cache); shadow that the
// rule is in shadow_mode.
func (e *EnvStats) decided(rs *ruleStats, hits int64, limit uint32, used int64, allowed, cached, shadow bool) {
	if e == nil || rs == nil {
		return
	}
	h := uint64(max(hits, 0))
	over := uint64(limit)
	if cached {
		rs.overLimit.Add(h)
		rs.overLimitLocal.Add(h)
		if shadow {
			rs.shadowMode.Add(h)
		}
		return
	}
	near := uint64(math.Floor(float64(float32(over) * e.nearRatio)))
	used = max(used, 0)
	if allowed {
		after := uint64(used)
		before := after - min(h, after)
		if after > near {
			if before >= near {
				rs.nearLimit.Add(h)
			} else {
				rs.nearLimit.Add(after - near)
			}
		}
		rs.withinLimit.Add(h)
		return
	}
	before := uint64(used)
	after := before + h
	if before >= over {
		rs.overLimit.Add(h)
	} else {
		rs.overLimit.Add(after - over)
		rs.nearLimit.Add(over - max(near, before))
	}
	if shadow {
		if before >= over {
			rs.shadowMode.Add(h)
		} else {
			rs.shadowMode.Add(after - over)
		}
	}
}

// domainNotFound counts a descriptor of a domain no file defines.
func (e *EnvStats) domainNotFound(domain string) {
	if e == nil {
		return
	}
	e.unknownMu.Lock()
	c, ok := e.unknown[domain]
	if !ok && len(e.unknown) < maxUnknownDomains {
		c = e.rules.NewCounter(SanitizeStatName(domain) + ".domain_not_found")
		e.unknown[domain] = c
	}
	e.unknownMu.Unlock()
	if c != nil {
		c.Inc()
	}
}

// call counts a ShouldRateLimit call: its time, and its error if any.
func (e *EnvStats) call(start time.Time, storeFailed bool, err error, globalShadow bool) {
	if e == nil {
		return
	}
	e.totalRequests.Inc()
	switch {
	case storeFailed:
		e.redisError.Inc()
	case err != nil:
		e.serviceError.Inc()
	}
	if globalShadow {
		e.globalShadow.Inc()
	}
	e.responseTime.AddValue(float64(time.Since(start).Milliseconds()))
}

// configLoaded counts a configuration load.
func (e *EnvStats) configLoaded(err error) {
	if e == nil {
		return
	}
	if err != nil {
		e.configLoadError.Inc()
		return
	}
	e.configLoadSuccess.Inc()
}

// SanitizeStatName is a stat name as envoyproxy/ratelimit sends it: ':'
// and '|', which statsd's line format reserves, become '_', and so do the
// dots of IPv4 addresses, which would split the name.
func SanitizeStatName(s string) string {
	s = strings.NewReplacer(":", "_", "|", "_").Replace(s)
	if !strings.Contains(s, ".") {
		return s
	}
	// IPv4 addresses: 1-3 digits, a dot, three times more (a longer run of
	// digits still ends in an address, as a regular expression finds it).
	b := []byte(s)
	for i := 0; i < len(b); {
		end, ok := ipv4At(b, i)
		if !ok {
			i++
			continue
		}
		for j := i; j < end; j++ {
			if b[j] == '.' {
				b[j] = '_'
			}
		}
		i = end
	}
	return string(b)
}

// ipv4At reports whether b holds \d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3} at i,
// matched leftmost and greedily as Go's regexp does, and where it ends.
func ipv4At(b []byte, i int) (int, bool) {
	j := i
	for part := range 4 {
		n := 0
		for j < len(b) && n < 3 && b[j] >= '0' && b[j] <= '9' {
			j++
			n++
		}
		if n == 0 {
			return 0, false
		}
		if part < 3 {
			if j >= len(b) || b[j] != '.' {
				return 0, false
			}
			j++
		}
	}
	return j, true
}

// newStatsdSink is gostats' network sink to addr. gostats reads its
// defaults from the environment and panics on a malformed one, so that is
// checked here first.
func newStatsdSink(addr, protocol string, log *slog.Logger) (sink gostats.FlushableSink, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("statsd address %q: %w (want host:port)", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 {
		return nil, fmt.Errorf("statsd address %q: port %q is not a number from 1 to 65535", addr, port)
	}
	if host == "" {
		host = "localhost"
	}
	switch protocol {
	case "":
		protocol = "udp"
	case "udp", "tcp":
	default:
		return nil, fmt.Errorf("statsd protocol %q is not udp or tcp", protocol)
	}
	defer func() {
		if r := recover(); r != nil {
			sink, err = nil, fmt.Errorf("statsd sink: %v", r)
		}
	}()
	return gostats.NewNetSink(gostats.WithStatsdHost(host), gostats.WithStatsdPort(p),
		gostats.WithStatsdProtocol(protocol), gostats.WithLogger(&statsdLogger{log: log})), nil
}

// statsdLogger hands gostats' reports to slog: a warning when the problem
// changes, debug records while it lasts (gostats retries a connection every
// 3 seconds, and reports each dropped buffer).
type statsdLogger struct {
	log  *slog.Logger
	mu   sync.Mutex
	last string
}

func (l *statsdLogger) report(msg string, args ...any) {
	text := "statsd: " + fmt.Sprintf(msg, args...)
	l.mu.Lock()
	repeated := text == l.last
	l.last = text
	l.mu.Unlock()
	if repeated {
		l.log.Debug(text)
		return
	}
	l.log.Warn(text)
}

func (l *statsdLogger) Errorf(msg string, args ...any) { l.report(msg, args...) }
func (l *statsdLogger) Warnf(msg string, args ...any)  { l.report(msg, args...) }

// multiSink sends every stat to each of its sinks.
type multiSink []gostats.Sink

func (m multiSink) FlushCounter(name string, v uint64) {
	for _, s := range m {
		s.FlushCounter(name, v)
	}
}

func (m multiSink) FlushGauge(name string, v uint64) {
	for _, s := range m {
		s.FlushGauge(name, v)
	}
}

func (m multiSink) FlushTimer(name string, v float64) {
	for _, s := range m {
		s.FlushTimer(name, v)
	}
}

func (m multiSink) Flush() {
	for _, s := range m {
		if f, ok := s.(gostats.FlushableSink); ok {
			f.Flush()
		}
	}
}
