package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"strings"
	"time"
)

// Config is a whole `sluice bench` run: what to load, how, and how to report
// it. The command fills it from its flags; Bench runs it. Errors name the
// flag of the field at fault (--rate for Rate), since that is what the
// operator can change.
type Config struct {
	Target      string // "http", "envoy" or "envoy-json"
	URL         string
	APIKey      string
	Route       string
	Cost        int64
	Rate        float64
	Concurrency int
	Duration    time.Duration
	Subjects    int
	Hot         float64
	Reference   string
	JSON        bool
	// Holds sends acquire/release pairs (a check that takes a hold, then
	// its release) instead of checks; Reserve sends "reserve": true.
	Holds   bool
	Reserve bool

	// The Envoy rate limit service (--target envoy).
	GRPCAddr    string
	GRPCConns   int
	Domain      string
	Descriptors []string
	SubjectKey  string

	// MetricsURL is where the server's process_cpu_seconds_total is read:
	// "" for --url + /metrics, "none" to skip. MetricsURLSet says it was
	// given explicitly, which makes a page without the metric an error.
	MetricsURL    string
	MetricsURLSet bool

	// The overload search (--overload).
	Overload     bool
	StepDuration time.Duration
	StepFactor   float64
	MaxRate      float64
	P99Limit     time.Duration
}

// DefaultConfig is the configuration of a bare `sluice bench`: the flags'
// defaults, kept here so the command and tests agree on them.
func DefaultConfig() Config {
	return Config{
		Target: "http", URL: "http://127.0.0.1:8080", Cost: 1, Concurrency: 64, Duration: 10 * time.Second,
		Subjects: 10_000, Reference: "/healthz", GRPCAddr: "127.0.0.1:8081", GRPCConns: 4, SubjectKey: "user",
		StepDuration: 5 * time.Second, StepFactor: 1.5, MaxRate: 200_000, P99Limit: 10 * time.Millisecond,
	}
}

// ParseDescriptor parses key=value[,key=value...]. An entry with no value
// is allowed for subjectKey only, whose value each request replaces.
func ParseDescriptor(s, subjectKey string) (Descriptor, error) {
	var d Descriptor
	for _, part := range strings.Split(s, ",") {
		key, value, hasValue := strings.Cut(strings.TrimSpace(part), "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch {
		case key == "":
			return nil, fmt.Errorf("--descriptor %q has an entry with no key; write key=value[,key=value...]", s)
		case !hasValue && key != subjectKey:
			return nil, fmt.Errorf("--descriptor %q: entry %q has no value; write %s=VALUE (only --subject-key %q may go without one)", s, key, key, subjectKey)
		case hasValue && value == "" && key != subjectKey:
			return nil, fmt.Errorf("--descriptor %q: entry %q has an empty value", s, key)
		}
		d = append(d, Entry{Key: key, Value: value})
	}
	return d, nil
}

// ParsedDescriptors are the Descriptors parsed, or, with none, one
// descriptor of the subject key alone.
func (c Config) ParsedDescriptors() ([]Descriptor, error) {
	if len(c.Descriptors) == 0 {
		if c.SubjectKey == "" {
			return nil, errors.New("--target envoy and envoy-json need a --descriptor key=value[,key=value...] (or a --subject-key to build one from)")
		}
		return []Descriptor{{{Key: c.SubjectKey}}}, nil
	}
	var ds []Descriptor
	found := c.SubjectKey == ""
	for _, s := range c.Descriptors {
		d, err := ParseDescriptor(s, c.SubjectKey)
		if err != nil {
			return nil, err
		}
		for _, e := range d {
			found = found || e.Key == c.SubjectKey
		}
		ds = append(ds, d)
	}
	if !found {
		return nil, fmt.Errorf("--subject-key %q is not the key of any --descriptor entry, so every request would hit the same counters; add %s to a descriptor, or set --subject-key \"\" to mean that", c.SubjectKey, c.SubjectKey)
	}
	return ds, nil
}

// metricsPage is where CPU is read, or "" when it is not measured.
func (c Config) metricsPage() string {
	switch c.MetricsURL {
	case "none":
		return ""
	case "":
		return strings.TrimRight(c.URL, "/") + "/metrics"
	}
	return c.MetricsURL
}

// Validate checks the configuration before anything is sent, so a mistake
// is one sentence naming its flag rather than a run of failures.
func (c Config) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--url %q must be an http:// or https:// base URL such as http://127.0.0.1:8080", c.URL)
	}
	switch c.Target {
	case "http":
		if c.APIKey == "" {
			return errors.New("--api-key is required: create a check key with `sluice key create TENANT --role check`")
		}
		if c.Route == "" {
			return errors.New("--route is required: the route selects the tenant's rule to exercise")
		}
		if c.Reference != "" && !strings.HasPrefix(c.Reference, "/") {
			return fmt.Errorf("--reference %q must be a path starting with /", c.Reference)
		}
	case "envoy-json":
		if c.Holds || c.Reserve {
			return errors.New("--holds and --reserve are for --target http: Envoy's API has no call to release a hold (see docs/envoy.md)")
		}
		if c.Domain == "" {
			return errors.New("--domain is required with --target envoy-json: it selects the rate limit configuration file")
		}
		if c.Cost > math.MaxUint32 {
			return fmt.Errorf("--cost %d does not fit Envoy's hits_addend (at most %d)", c.Cost, uint32(math.MaxUint32))
		}
		if c.Reference != "" && !strings.HasPrefix(c.Reference, "/") {
			return fmt.Errorf("--reference %q must be a path starting with /, such as /healthcheck", c.Reference)
		}
		if _, err := c.ParsedDescriptors(); err != nil {
			return err
		}
	case "envoy":
		if c.Holds || c.Reserve {
			return errors.New("--holds and --reserve are for --target http: Envoy's API has no call to release a hold (see docs/envoy.md)")
		}
		if c.Domain == "" {
			return errors.New("--domain is required with --target envoy: it selects the rate limit configuration file")
		}
		if host, port, err := net.SplitHostPort(c.GRPCAddr); err != nil || host == "" || port == "" {
			return fmt.Errorf("--grpc-addr %q must be host:port, such as 127.0.0.1:8081", c.GRPCAddr)
		}
		if c.GRPCConns < 1 || c.GRPCConns > 1024 {
			return fmt.Errorf("--grpc-conns must be between 1 and 1024, got %d", c.GRPCConns)
		}
		if c.Cost > math.MaxUint32 {
			return fmt.Errorf("--cost %d does not fit Envoy's hits_addend (at most %d)", c.Cost, uint32(math.MaxUint32))
		}
		if c.Reference != "" && c.Reference != "/healthz" {
			return fmt.Errorf("--reference %q is an HTTP path; with --target envoy the reference is the gRPC health check, or none with --reference \"\"", c.Reference)
		}
		if _, err := c.ParsedDescriptors(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--target %q is not a target; use http (the check API), envoy (the gRPC rate limit service) or envoy-json (its HTTP face, POST /json)", c.Target)
	}
	if c.Cost < 0 {
		return fmt.Errorf("--cost must not be negative, got %d", c.Cost)
	}
	if m := c.MetricsURL; m != "" && m != "none" {
		if u, err := url.Parse(m); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--metrics-url %q must be an http:// or https:// URL such as http://127.0.0.1:8080/metrics, or none", m)
		}
	}
	switch {
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("--rate must be a positive number of checks per second (open model) or 0 (closed model), got %v", c.Rate)
	case c.Concurrency < 1:
		return fmt.Errorf("--concurrency must be at least 1, got %d", c.Concurrency)
	case c.Duration <= 0 && !c.Overload:
		return fmt.Errorf("--duration must be positive, got %v", c.Duration)
	case c.Subjects < 1:
		return fmt.Errorf("--subjects must be at least 1, got %d", c.Subjects)
	case c.Hot < 0 || c.Hot > 1 || math.IsNaN(c.Hot):
		return fmt.Errorf("--hot is a fraction of the checks, between 0 and 1; got %v", c.Hot)
	}
	if c.Overload {
		switch {
		case c.Rate <= 0:
			return errors.New("--overload steps an open-model rate up: set --rate to the first step's checks per second")
		case c.StepDuration <= 0:
			return fmt.Errorf("--step-duration must be positive, got %v", c.StepDuration)
		case !(c.StepFactor > 1) || math.IsInf(c.StepFactor, 0):
			return fmt.Errorf("--step-factor must be above 1 so each step offers more than the last, got %v", c.StepFactor)
		case !(c.MaxRate >= c.Rate) || math.IsInf(c.MaxRate, 0):
			return fmt.Errorf("--max-rate %v must be at least --rate %v", c.MaxRate, c.Rate)
		case c.P99Limit <= 0:
			return fmt.Errorf("--p99-limit must be positive, got %v", c.P99Limit)
		}
	}
	return nil
}

// benchTargets is what a configuration loads: the target, its reference
// (nil for none) and their names in the report.
type benchTargets struct {
	target, reference         Target
	targetName, referenceName string
	close                     func() error
}

func newBenchTargets(cfg Config) (benchTargets, error) {
	base := strings.TrimRight(cfg.URL, "/")
	if cfg.Target == "http" {
		t := benchTargets{
			target:     NewHTTPCheck(base, cfg.APIKey, cfg.Route, cfg.Cost, cfg.Concurrency),
			targetName: "POST /v1/check " + cfg.Route,
			close:      func() error { return nil },
		}
		if cfg.Holds {
			t.target = NewHTTPHoldPair(base, cfg.APIKey, cfg.Route, cfg.Cost, cfg.Reserve, cfg.Concurrency)
			t.targetName = "POST /v1/check " + cfg.Route + " + DELETE /v1/holds/{id}"
		}
		if cfg.Reference != "" {
			t.reference = NewHTTPGet(base+cfg.Reference, cfg.Concurrency)
			t.referenceName = "GET " + cfg.Reference + " (reference)"
		}
		return t, nil
	}
	ds, err := cfg.ParsedDescriptors()
	if err != nil {
		return benchTargets{}, err
	}
	if cfg.Target == "envoy-json" {
		check, err := NewEnvoyJSON(base, cfg.Domain, ds, cfg.SubjectKey, uint32(cfg.Cost), cfg.Concurrency)
		if err != nil {
			return benchTargets{}, err
		}
		t := benchTargets{target: check, targetName: "POST /json " + cfg.Domain, close: func() error { return nil }}
		if cfg.Reference != "" {
			t.reference = NewHTTPGet(base+cfg.Reference, cfg.Concurrency)
			t.referenceName = "GET " + cfg.Reference + " (reference)"
		}
		return t, nil
	}
	conns, err := DialGRPC(cfg.GRPCAddr, cfg.GRPCConns)
	if err != nil {
		return benchTargets{}, err
	}
	check, err := NewEnvoyCheck(conns, cfg.Domain, ds, cfg.SubjectKey, uint32(cfg.Cost))
	if err != nil {
		conns.Close()
		return benchTargets{}, err
	}
	t := benchTargets{target: check, targetName: "ShouldRateLimit " + cfg.Domain, close: conns.Close}
	if cfg.Reference != "" {
		// The same connections: the reference measures the same transport.
		t.reference = NewGRPCHealth(conns, "")
		t.referenceName = "grpc.health.v1 Check (reference)"
	}
	return t, nil
}

// benchCPU returns the CPU reader of the run, or nil with the reason it is
// left out. A page given by --metrics-url that cannot be read is an error;
// the default one, which a server may not serve, only leaves CPU out.
func benchCPU(ctx context.Context, cfg Config) (read func(context.Context) (float64, error), note string, err error) {
	u := cfg.metricsPage()
	if u == "" {
		return nil, "", nil
	}
	cpu := NewProcessCPU(u)
	if _, err := cpu.Seconds(ctx); err != nil {
		if cfg.MetricsURLSet {
			return nil, "", fmt.Errorf("--metrics-url: %w", err)
		}
		return nil, fmt.Sprintf("CPU per check not measured: %v (set --metrics-url, or --metrics-url none)", err), nil
	}
	return cpu.Seconds, "", nil
}

// Bench validates cfg, runs it and writes the report to out (a table, or
// JSON), with notes and each overload step as it ends on progress. One
// check goes first, so a wrong key, address or domain fails at once with
// the reason instead of as a run of failures.
func Bench(ctx context.Context, cfg Config, out, progress io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	targets, err := newBenchTargets(cfg)
	if err != nil {
		return err
	}
	defer targets.close()
	cpu, cpuNote, err := benchCPU(ctx, cfg)
	if err != nil {
		return err
	}
	if cpuNote != "" {
		fmt.Fprintln(progress, cpuNote)
	}
	if _, err := targets.target.Do(ctx, "sluice-bench-probe"); err != nil {
		return fmt.Errorf("first check failed, not starting the run: %w", err)
	}
	opts := Options{Rate: cfg.Rate, Concurrency: cfg.Concurrency, Duration: cfg.Duration, Subjects: cfg.Subjects, HotFraction: cfg.Hot, CPU: cpu}
	if cfg.Overload {
		return benchOverload(ctx, cfg, targets, opts, out, progress)
	}

	res, err := Run(ctx, targets.target, opts)
	if err != nil {
		return err
	}
	reports := []Report{NewReport(targets.targetName, res)}
	if targets.reference != nil && ctx.Err() == nil {
		ref, err := Run(ctx, targets.reference, opts)
		if err != nil {
			return err
		}
		reports = append(reports, NewReport(targets.referenceName, ref))
	}
	if cfg.JSON {
		return encodeJSON(out, reports)
	}
	PrintReports(out, cfg.loadLine(), reports)
	return nil
}

func encodeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// loadLine describes the load of a run, for the report's first line.
func (c Config) loadLine() string {
	load := fmt.Sprintf("closed model, %d callers", c.Concurrency)
	if c.Rate > 0 {
		load = fmt.Sprintf("open model, %.0f/s offered by %d senders", c.Rate, c.Concurrency)
	}
	return fmt.Sprintf("%s for %v; %d subjects, %.0f%% to one hot subject", load, c.Duration, c.Subjects, c.Hot*100)
}

func benchOverload(ctx context.Context, cfg Config, targets benchTargets, opts Options, out, progress io.Writer) error {
	opts.Duration = cfg.StepDuration
	ov := OverloadOptions{Options: opts, Factor: cfg.StepFactor, MaxRate: cfg.MaxRate, P99: cfg.P99Limit}
	rep := OverloadReport{Target: targets.targetName, P99Ms: Ms(cfg.P99Limit)}
	res, err := RunOverload(ctx, targets.target, ov, func(s Step) {
		st := OverloadStep{OfferedRate: s.Rate, Healthy: s.Healthy, TwiceEdge: s.Beyond, Report: NewReport(targets.targetName, s.Result)}
		rep.Steps = append(rep.Steps, st)
		fmt.Fprintf(progress, "step %d: %.0f/s offered, %.0f/s served, p99 %.3f ms, %d shed, %d failed, %d dropped: %s\n",
			len(rep.Steps), st.OfferedRate, st.PerSecond, st.P99Ms, st.Shed, st.Failed, st.Dropped, st.Verdict())
	})
	rep.Edge, rep.EdgeIsLowerBound = res.Edge, res.Bounded
	if err != nil && len(rep.Steps) == 0 {
		return err
	}
	if cfg.JSON {
		if encErr := encodeJSON(out, rep); encErr != nil {
			return encErr
		}
	} else {
		PrintOverload(out, rep, OverloadPrint{
			Header: fmt.Sprintf("%s: overload search, open model, steps of %v from %.0f/s ×%.2f (at most %.0f/s), %d senders; %d subjects, %.0f%% to one hot subject",
				rep.Target, cfg.StepDuration, cfg.Rate, cfg.StepFactor, cfg.MaxRate, cfg.Concurrency, cfg.Subjects, cfg.Hot*100),
			StartRate: cfg.Rate, MaxRate: cfg.MaxRate, P99: cfg.P99Limit,
		})
	}
	return err
}
