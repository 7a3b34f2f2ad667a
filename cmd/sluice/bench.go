package main

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

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicelabs/sluice/loadgen"
)

// benchConfig is what sluice bench is configured with.
type benchConfig struct {
	Target      string // "http" or "envoy"
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

func init() { rootCmd.AddCommand(newBenchCmd()) }

func newBenchCmd() *cobra.Command {
	var cfg benchConfig
	cmd := &cobra.Command{
		Use:   "bench [--target http --api-key KEY --route ROUTE | --target envoy --domain D --descriptor k=v,...] [--rate N | --concurrency N] [--overload]",
		Short: "Load a running sluice serve's check API and report throughput, latency and CPU per check",
		Long: `Send checks to a running sluice serve and report how many were allowed,
denied, shed and failed, the throughput, latency percentiles, and the server's
CPU time per answered check.

Targets:
  --target http (default): the check API, POST /v1/check with --api-key and
    --route. 200 is allowed, 429 denied.
  --target envoy: Envoy's rate limit service over gRPC (--grpc-addr), with
    --domain and one request descriptor per --descriptor key=value[,key=value].
    The entry keyed --subject-key gets the drawn subject as its value (a bare
    key is enough: --descriptor user). OK is allowed, OVER_LIMIT denied. The
    load goes over --grpc-conns shared connections, without TLS.

A deny is an answer, not an error. A shed request (HTTP 503 with the error code
"overloaded", or gRPC RESOURCE_EXHAUSTED) is counted apart with its own
latency; any other error (503 store_unavailable, UNAVAILABLE, a timeout) is a
failure.

--rate N runs the open model: N checks per second arrive whatever the service
does, and latency counts from when each was due (a slow service shows up as the
queueing its clients would see). Without --rate, --concurrency callers send
back to back (closed model).

Subjects are drawn from --subjects distinct ones, --hot of the checks going to
one hot subject. After the run, the same load is sent to a reference that does
no work on the same server: --reference (default /healthz) for HTTP, the
standard gRPC health check (grpc.health.v1.Health/Check) for Envoy. It is what
the round trip alone costs on this machine, to read the check's figures
against; --reference "" skips it.

CPU per check: the server's process_cpu_seconds_total is read from
--metrics-url (default --url + /metrics) just before and just after each
measured run; the difference divided by the answered checks (allowed plus
denied; shed and failed ones are charged to them) is the CPU µs per check. The
counter moves in 10 ms ticks, so runs of several seconds give usable figures.
If the default page does not serve it, the figure is left out with the reason;
--metrics-url none skips it.

--overload searches for the service's edge, in the open model: steps of
--step-duration, the first at --rate, each --step-factor times the last. The
edge is the highest offered rate at which a step kept its p99 under
--p99-limit with no failed, shed or dropped requests (every request due was
sent and answered). The search stops after the first step past the edge, or
before a step would exceed --max-rate (then the edge is only a lower bound),
and, when it found the edge, runs one last step at twice the edge to show what
overload does. Each step is reported: offered and served rate, allowed,
denied, shed and failed counts, p50, p99 and CPU per check. The generator needs
enough --concurrency senders for the rates it offers; its "late" count shows
when it fell behind.

Run the generator on another machine than the service when you can; on one
machine they share the CPU (and the CPU figure is the server process's alone).`,
		Example: `  sluice bench --api-key "$KEY" --route /api/payments/1 --rate 2000 --duration 20s
  sluice bench --api-key "$KEY" --route /api/orders --concurrency 32 --subjects 100000 --hot 0.2
  sluice bench --target envoy --grpc-addr 127.0.0.1:8081 --domain api --descriptor api=orders,user --subject-key user --rate 5000
  sluice bench --target envoy --domain api --descriptor user --overload --rate 1000 --step-factor 1.5 --p99-limit 10ms`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.MetricsURLSet = cmd.Flags().Changed("metrics-url")
			return runBench(cmd.Context(), cfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addBenchFlags(cmd.Flags(), &cfg)
	return cmd
}

// addBenchFlags defines sluice bench's flags on f, with their defaults in cfg.
func addBenchFlags(f *pflag.FlagSet, cfg *benchConfig) {
	f.StringVar(&cfg.Target, "target", "http", "what to load: http (POST /v1/check) or envoy (the gRPC rate limit service)")
	f.StringVar(&cfg.URL, "url", "http://127.0.0.1:8080", "base URL of the sluice serve to load (HTTP target, reference and metrics)")
	f.StringVar(&cfg.APIKey, "api-key", "", "http: a check API key of the tenant whose rule is exercised")
	f.StringVar(&cfg.Route, "route", "", "http: the route every check names (it selects the tenant's rule)")
	f.Int64Var(&cfg.Cost, "cost", 1, "cost of each check (envoy: hits_addend)")
	f.Float64Var(&cfg.Rate, "rate", 0, "open model: checks per second (0: closed model); with --overload, the first step's rate")
	f.IntVar(&cfg.Concurrency, "concurrency", 64, "closed model callers, or open model senders")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "length of each measured run")
	f.IntVar(&cfg.Subjects, "subjects", 10_000, "number of distinct subjects")
	f.Float64Var(&cfg.Hot, "hot", 0, "fraction of checks (0 to 1) that go to one hot subject")
	f.StringVar(&cfg.Reference, "reference", "/healthz", "http: path measured after the run with the same load, as the reference; envoy: the gRPC health check is the reference (empty: none)")
	f.BoolVar(&cfg.JSON, "json", false, "print the results as JSON")
	f.BoolVar(&cfg.Holds, "holds", false, "http: send acquire/release pairs, a check that takes a hold (a rule with a concurrency limit, or --reserve) then DELETE /v1/holds/{id}, measured together")
	f.BoolVar(&cfg.Reserve, "reserve", false, `http: send "reserve": true with each check (with --holds: the hold is released, the estimate stands)`)
	f.StringVar(&cfg.GRPCAddr, "grpc-addr", "127.0.0.1:8081", "envoy: host:port of the gRPC rate limit service")
	f.IntVar(&cfg.GRPCConns, "grpc-conns", 4, "envoy: gRPC connections the load is spread over")
	f.StringVar(&cfg.Domain, "domain", "", "envoy: the rate limit domain of every request")
	f.StringArrayVar(&cfg.Descriptors, "descriptor", nil, "envoy: one request descriptor, key=value[,key=value...]; repeat for several (default: one descriptor of --subject-key)")
	f.StringVar(&cfg.SubjectKey, "subject-key", "user", `envoy: the descriptor entry whose value is the drawn subject ("": send the descriptors as given)`)
	f.StringVar(&cfg.MetricsURL, "metrics-url", "", `Prometheus page with the server's process_cpu_seconds_total (default: --url + /metrics; "none": do not measure CPU)`)
	f.BoolVar(&cfg.Overload, "overload", false, "step the open-model rate up from --rate to find the edge, then run at twice the edge")
	f.DurationVar(&cfg.StepDuration, "step-duration", 5*time.Second, "overload: length of each step")
	f.Float64Var(&cfg.StepFactor, "step-factor", 1.5, "overload: each step's rate is the last one's times this")
	f.Float64Var(&cfg.MaxRate, "max-rate", 200_000, "overload: no step of the search goes above this rate")
	f.DurationVar(&cfg.P99Limit, "p99-limit", 10*time.Millisecond, "overload: a step whose p99 reaches this is past the edge")
}

// parseDescriptor parses key=value[,key=value...]. An entry with no value
// is allowed for subjectKey only, whose value each request replaces.
func parseDescriptor(s, subjectKey string) (loadgen.Descriptor, error) {
	var d loadgen.Descriptor
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
		d = append(d, loadgen.Entry{Key: key, Value: value})
	}
	return d, nil
}

// descriptors are the --descriptor flags parsed, or, with none, one
// descriptor of the subject key alone.
func (c benchConfig) descriptors() ([]loadgen.Descriptor, error) {
	if len(c.Descriptors) == 0 {
		if c.SubjectKey == "" {
			return nil, errors.New("--target envoy needs a --descriptor key=value[,key=value...] (or a --subject-key to build one from)")
		}
		return []loadgen.Descriptor{{{Key: c.SubjectKey}}}, nil
	}
	var ds []loadgen.Descriptor
	found := c.SubjectKey == ""
	for _, s := range c.Descriptors {
		d, err := parseDescriptor(s, c.SubjectKey)
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

// metricsURL is where CPU is read, or "" when it is not measured.
func (c benchConfig) metricsURL() string {
	switch c.MetricsURL {
	case "none":
		return ""
	case "":
		return strings.TrimRight(c.URL, "/") + "/metrics"
	}
	return c.MetricsURL
}

func (c benchConfig) validate() error {
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
		if _, err := c.descriptors(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--target %q is not a target; use http (the check API) or envoy (the gRPC rate limit service)", c.Target)
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
	target, reference         loadgen.Target
	targetName, referenceName string
	close                     func() error
}

func newBenchTargets(cfg benchConfig) (benchTargets, error) {
	base := strings.TrimRight(cfg.URL, "/")
	if cfg.Target == "http" {
		t := benchTargets{
			target:     loadgen.NewHTTPCheck(base, cfg.APIKey, cfg.Route, cfg.Cost, cfg.Concurrency),
			targetName: "POST /v1/check " + cfg.Route,
			close:      func() error { return nil },
		}
		if cfg.Holds {
			t.target = loadgen.NewHTTPHoldPair(base, cfg.APIKey, cfg.Route, cfg.Cost, cfg.Reserve, cfg.Concurrency)
			t.targetName = "POST /v1/check " + cfg.Route + " + DELETE /v1/holds/{id}"
		}
		if cfg.Reference != "" {
			t.reference = loadgen.NewHTTPGet(base+cfg.Reference, cfg.Concurrency)
			t.referenceName = "GET " + cfg.Reference + " (reference)"
		}
		return t, nil
	}
	ds, err := cfg.descriptors()
	if err != nil {
		return benchTargets{}, err
	}
	conns, err := loadgen.DialGRPC(cfg.GRPCAddr, cfg.GRPCConns)
	if err != nil {
		return benchTargets{}, err
	}
	check, err := loadgen.NewEnvoyCheck(conns, cfg.Domain, ds, cfg.SubjectKey, uint32(cfg.Cost))
	if err != nil {
		conns.Close()
		return benchTargets{}, err
	}
	t := benchTargets{target: check, targetName: "ShouldRateLimit " + cfg.Domain, close: conns.Close}
	if cfg.Reference != "" {
		// The same connections: the reference measures the same transport.
		t.reference = loadgen.NewGRPCHealth(conns, "")
		t.referenceName = "grpc.health.v1 Check (reference)"
	}
	return t, nil
}

// benchCPU returns the CPU reader of the run, or nil with the reason it is
// left out. A page given by --metrics-url that cannot be read is an error;
// the default one, which a server may not serve, only leaves CPU out.
func benchCPU(ctx context.Context, cfg benchConfig) (read func(context.Context) (float64, error), note string, err error) {
	u := cfg.metricsURL()
	if u == "" {
		return nil, "", nil
	}
	cpu := loadgen.NewProcessCPU(u)
	if _, err := cpu.Seconds(ctx); err != nil {
		if cfg.MetricsURLSet {
			return nil, "", fmt.Errorf("--metrics-url: %w", err)
		}
		return nil, fmt.Sprintf("CPU per check not measured: %v (set --metrics-url, or --metrics-url none)", err), nil
	}
	return cpu.Seconds, "", nil
}

func runBench(ctx context.Context, cfg benchConfig, out, progress io.Writer) error {
	if err := cfg.validate(); err != nil {
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
	// One check first, so a wrong key, address or domain fails at once with
	// the reason.
	if _, err := targets.target.Do(ctx, "sluice-bench-probe"); err != nil {
		return fmt.Errorf("first check failed, not starting the run: %w", err)
	}
	opts := loadgen.Options{Rate: cfg.Rate, Concurrency: cfg.Concurrency, Duration: cfg.Duration, Subjects: cfg.Subjects, HotFraction: cfg.Hot, CPU: cpu}
	if cfg.Overload {
		return runOverload(ctx, cfg, targets, opts, out, progress)
	}

	res, err := loadgen.Run(ctx, targets.target, opts)
	if err != nil {
		return err
	}
	reports := []loadgen.Report{loadgen.NewReport(targets.targetName, res)}
	if targets.reference != nil && ctx.Err() == nil {
		ref, err := loadgen.Run(ctx, targets.reference, opts)
		if err != nil {
			return err
		}
		reports = append(reports, loadgen.NewReport(targets.referenceName, ref))
	}
	if cfg.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	}
	loadgen.PrintReports(out, loadLine(cfg), reports)
	return nil
}

func loadLine(cfg benchConfig) string {
	load := fmt.Sprintf("closed model, %d callers", cfg.Concurrency)
	if cfg.Rate > 0 {
		load = fmt.Sprintf("open model, %.0f/s offered by %d senders", cfg.Rate, cfg.Concurrency)
	}
	return fmt.Sprintf("%s for %v; %d subjects, %.0f%% to one hot subject", load, cfg.Duration, cfg.Subjects, cfg.Hot*100)
}

func runOverload(ctx context.Context, cfg benchConfig, targets benchTargets, opts loadgen.Options, out, progress io.Writer) error {
	opts.Duration = cfg.StepDuration
	ov := loadgen.OverloadOptions{Options: opts, Factor: cfg.StepFactor, MaxRate: cfg.MaxRate, P99: cfg.P99Limit}
	rep := loadgen.OverloadReport{Target: targets.targetName, P99Ms: loadgen.Ms(cfg.P99Limit)}
	res, err := loadgen.RunOverload(ctx, targets.target, ov, func(s loadgen.Step) {
		st := loadgen.OverloadStep{OfferedRate: s.Rate, Healthy: s.Healthy, TwiceEdge: s.Beyond, Report: loadgen.NewReport(targets.targetName, s.Result)}
		rep.Steps = append(rep.Steps, st)
		fmt.Fprintf(progress, "step %d: %.0f/s offered, %.0f/s served, p99 %.3f ms, %d shed, %d failed, %d dropped: %s\n",
			len(rep.Steps), st.OfferedRate, st.PerSecond, st.P99Ms, st.Shed, st.Failed, st.Dropped, st.Verdict())
	})
	rep.Edge, rep.EdgeIsLowerBound = res.Edge, res.Bounded
	if err != nil && len(rep.Steps) == 0 {
		return err
	}
	if cfg.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if encErr := enc.Encode(rep); encErr != nil {
			return encErr
		}
	} else {
		loadgen.PrintOverload(out, rep, loadgen.OverloadPrint{
			Header: fmt.Sprintf("%s: overload search, open model, steps of %v from %.0f/s ×%.2f (at most %.0f/s), %d senders; %d subjects, %.0f%% to one hot subject",
				rep.Target, cfg.StepDuration, cfg.Rate, cfg.StepFactor, cfg.MaxRate, cfg.Concurrency, cfg.Subjects, cfg.Hot*100),
			StartRate: cfg.Rate, MaxRate: cfg.MaxRate, P99: cfg.P99Limit,
		})
	}
	return err
}
