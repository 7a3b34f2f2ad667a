package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/statsd_exporter/pkg/event"
	"github.com/prometheus/statsd_exporter/pkg/exporter"
	"github.com/prometheus/statsd_exporter/pkg/mapper"
)

// DefaultPrometheusMapping is the statsd_exporter mapping that turns
// EnvStats' names into the Prometheus series envoyproxy/ratelimit serves
// in its Prometheus mode:
//
//	ratelimit_service_rate_limit_{total_hits,within_limit,near_limit,over_limit,shadow_mode}{domain,key1[,key2]}
//	ratelimit_service_should_rate_limit_error{err_type}
//	ratelimit_service_total_requests{grpc_method}
//	ratelimit_service_response_time_seconds{grpc_method} (a histogram)
//	ratelimit_service_config_load_success, ratelimit_service_config_load_error
//
// A key of one descriptor level gives key1, deeper ones key1 and key2. The
// stats no mapping names (over_limit_with_local_cache, domain_not_found,
// global_shadow_mode) are served under their statsd names with the dots
// turned into '_', as statsd_exporter does. A mapping file
// (PROMETHEUS_MAPPER_YAML) replaces this one whole.
var DefaultPrometheusMapping = defaultPrometheusMapping(false)

// defaultPrometheusMapping is the default mapping; millis leaves the
// response time in milliseconds.
func defaultPrometheusMapping(millis bool) string {
	var b strings.Builder
	b.WriteString("mappings:\n")
	perRule := []string{"near_limit", "over_limit", "total_hits", "within_limit", "shadow_mode"}
	// One level: a glob, whose '*' stops at a dot.
	for _, stat := range perRule {
		fmt.Fprintf(&b, "- match: ratelimit.service.rate_limit.*.*.%s\n  name: ratelimit_service_rate_limit_%s\n  timer_type: histogram\n  labels:\n    domain: $1\n    key1: $2\n", stat, stat)
	}
	// Two levels and more: the first two keys name the series.
	for _, stat := range perRule {
		re := `ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.` + stat
		fmt.Fprintf(&b, "- match: '%s'\n  match_type: regex\n  name: ratelimit_service_rate_limit_%s\n  timer_type: histogram\n  labels:\n    domain: $1\n    key1: $2\n    key2: $3\n", re, stat)
	}
	b.WriteString(`- match: ratelimit.service.call.should_rate_limit.*
  name: ratelimit_service_should_rate_limit_error
  match_metric_type: counter
  labels:
    err_type: $1
- match: ratelimit_server.*.total_requests
  name: ratelimit_service_total_requests
  match_metric_type: counter
  labels:
    grpc_method: $1
- match: ratelimit_server.*.response_time
  name: ratelimit_service_response_time_seconds
  timer_type: histogram
`)
	if !millis {
		b.WriteString("  scale: 0.001\n")
	}
	b.WriteString(`  labels:
    grpc_method: $1
`)
	for _, stat := range []string{"config_load_success", "config_load_error"} {
		fmt.Fprintf(&b, "- match: ratelimit.service.%s\n  name: ratelimit_service_%s\n  match_metric_type: counter\n", stat, stat)
	}
	return b.String()
}

// prometheusSink hands every stat to statsd_exporter's exporter as an
// event, as envoyproxy/ratelimit's Prometheus mode does, and serves the
// series on a listener of its own: the exporter's, the Go runtime's and the
// process's, never Sluice's own metrics.
type prometheusSink struct {
	events chan event.Events
	done   chan struct{}
	srv    *http.Server
	serve  chan error
	addr   string       // the listener's address
	mu     sync.RWMutex // guards closed against sends
	closed bool
}

// newPrometheusSink reads the mapping (mapperFile, or the default) and
// binds addr before it returns, so a bad file or a taken port stops the
// start.
func newPrometheusSink(opts EnvStatsOptions, log *slog.Logger) (*prometheusSink, error) {
	addr, path, mapperFile := opts.PrometheusAddr, opts.PrometheusPath, opts.PrometheusMapper
	if path == "" {
		path = "/metrics"
	}
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("prometheus path %q must start with '/'", path)
	}
	reg := prometheus.NewRegistry()
	m := &mapper.MetricMapper{Registerer: reg}
	if mapperFile != "" {
		if _, err := os.Stat(mapperFile); err != nil {
			return nil, fmt.Errorf("prometheus mapper file: %w", err)
		}
		if err := m.InitFromFile(mapperFile); err != nil {
			return nil, fmt.Errorf("prometheus mapper file %s: %w", mapperFile, err)
		}
	} else if err := m.InitFromYAMLString(defaultPrometheusMapping(opts.PrometheusResponseTimeMillis)); err != nil {
		// A programming error: the default mapping is ours.
		panic("envoyrls: default prometheus mapping: " + err.Error())
	}
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for prometheus on %s: %w", addr, err)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	counterVec := func(name, help, label string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
		reg.MustRegister(c)
		return c
	}
	unmapped := prometheus.NewCounter(prometheus.CounterOpts{Name: "statsd_exporter_events_unmapped_total", Help: "The total number of StatsD events no mapping was found for."})
	metricsCount := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "statsd_exporter_metrics_total", Help: "The total number of metrics."}, []string{"type"})
	reg.MustRegister(unmapped, metricsCount)
	exp := exporter.NewExporter(reg, m, slog.New(slog.DiscardHandler),
		counterVec("statsd_exporter_events_actions_total", "The total number of StatsD events by action.", "action"),
		unmapped,
		counterVec("statsd_exporter_events_error_total", "The total number of StatsD events discarded due to errors.", "reason"),
		counterVec("statsd_exporter_events_total", "The total number of StatsD events seen.", "type"),
		counterVec("statsd_exporter_events_conflict_total", "The total number of StatsD events with conflicting names.", "type"),
		metricsCount)

	s := &prometheusSink{events: make(chan event.Events, 1024), done: make(chan struct{}), serve: make(chan error, 1), addr: lis.Addr().String()}
	go func() {
		defer close(s.done)
		exp.Listen(s.events)
	}()
	mux := http.NewServeMux()
	mux.Handle(path, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("envoyproxy/ratelimit's Prometheus series listening", "addr", lis.Addr().String(), "path", path)
	go func() { s.serve <- s.srv.Serve(lis) }()
	return s, nil
}

func (s *prometheusSink) send(e event.Event) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.closed {
		s.events <- event.Events{e}
	}
}

func (s *prometheusSink) FlushCounter(name string, v uint64) {
	s.send(&event.CounterEvent{CMetricName: name, CValue: float64(v), CLabels: map[string]string{}})
}

func (s *prometheusSink) FlushGauge(name string, v uint64) {
	s.send(&event.GaugeEvent{GMetricName: name, GValue: float64(v), GLabels: map[string]string{}})
}

func (s *prometheusSink) FlushTimer(name string, v float64) {
	s.send(&event.ObserverEvent{OMetricName: name, OValue: v, OLabels: map[string]string{}})
}

// Close stops taking stats, lets the exporter take those sent, and closes
// the listener.
func (s *prometheusSink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.events)
	s.mu.Unlock()
	<-s.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	if err := <-s.serve; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("prometheus listener: %w", err)
	}
	return nil
}

// PrometheusAddr is where the Prometheus series are served ("" for
// none), the port chosen when the address asked for port 0.
func (e *EnvStats) PrometheusAddr() string {
	if e == nil || e.prom == nil {
		return ""
	}
	return e.prom.addr
}
