package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicelabs/sluice/loadgen"
)

func init() { rootCmd.AddCommand(newBenchCmd()) }

func newBenchCmd() *cobra.Command {
	cfg := loadgen.DefaultConfig()
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
  --target envoy-json: the same requests to the HTTP face of Envoy's rate limit
    service at --url (POST /json, as envoyproxy/ratelimit and sluice in its
    mode serve it); 200 is allowed, 429 denied. --reference is a GET path
    (envoyproxy/ratelimit's is /healthcheck; "" for none).

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
			return loadgen.Bench(cmd.Context(), cfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addBenchFlags(cmd.Flags(), &cfg)
	return cmd
}

// addBenchFlags defines sluice bench's flags on f, with their defaults
// (loadgen.DefaultConfig) in cfg.
func addBenchFlags(f *pflag.FlagSet, cfg *loadgen.Config) {
	d := *cfg
	f.StringVar(&cfg.Target, "target", d.Target, "what to load: http (POST /v1/check), envoy (the gRPC rate limit service) or envoy-json (its POST /json)")
	f.StringVar(&cfg.URL, "url", d.URL, "base URL of the sluice serve to load (HTTP target, reference and metrics)")
	f.StringVar(&cfg.APIKey, "api-key", "", "http: a check API key of the tenant whose rule is exercised")
	f.StringVar(&cfg.Route, "route", "", "http: the route every check names (it selects the tenant's rule)")
	f.Int64Var(&cfg.Cost, "cost", d.Cost, "cost of each check (envoy: hits_addend)")
	f.Float64Var(&cfg.Rate, "rate", d.Rate, "open model: checks per second (0: closed model); with --overload, the first step's rate")
	f.IntVar(&cfg.Concurrency, "concurrency", d.Concurrency, "closed model callers, or open model senders")
	f.DurationVar(&cfg.Duration, "duration", d.Duration, "length of each measured run")
	f.IntVar(&cfg.Subjects, "subjects", d.Subjects, "number of distinct subjects")
	f.Float64Var(&cfg.Hot, "hot", d.Hot, "fraction of checks (0 to 1) that go to one hot subject")
	f.StringVar(&cfg.Reference, "reference", d.Reference, "http and envoy-json: path measured after the run with the same load, as the reference; envoy: the gRPC health check is the reference (empty: none)")
	f.BoolVar(&cfg.JSON, "json", false, "print the results as JSON")
	f.BoolVar(&cfg.Holds, "holds", false, "http: send acquire/release pairs, a check that takes a hold (a rule with a concurrency limit, or --reserve) then DELETE /v1/holds/{id}, measured together")
	f.BoolVar(&cfg.Reserve, "reserve", false, `http: send "reserve": true with each check (with --holds: the hold is released, the estimate stands)`)
	f.StringVar(&cfg.GRPCAddr, "grpc-addr", d.GRPCAddr, "envoy: host:port of the gRPC rate limit service")
	f.IntVar(&cfg.GRPCConns, "grpc-conns", d.GRPCConns, "envoy: gRPC connections the load is spread over")
	f.StringVar(&cfg.Domain, "domain", "", "envoy: the rate limit domain of every request")
	f.StringArrayVar(&cfg.Descriptors, "descriptor", nil, "envoy: one request descriptor, key=value[,key=value...]; repeat for several (default: one descriptor of --subject-key)")
	f.StringVar(&cfg.SubjectKey, "subject-key", d.SubjectKey, `envoy: the descriptor entry whose value is the drawn subject ("": send the descriptors as given)`)
	f.StringVar(&cfg.MetricsURL, "metrics-url", "", `Prometheus page with the server's process_cpu_seconds_total (default: --url + /metrics; "none": do not measure CPU)`)
	f.BoolVar(&cfg.Overload, "overload", false, "step the open-model rate up from --rate to find the edge, then run at twice the edge")
	f.DurationVar(&cfg.StepDuration, "step-duration", d.StepDuration, "overload: length of each step")
	f.Float64Var(&cfg.StepFactor, "step-factor", d.StepFactor, "overload: each step's rate is the last one's times this")
	f.Float64Var(&cfg.MaxRate, "max-rate", d.MaxRate, "overload: no step of the search goes above this rate")
	f.DurationVar(&cfg.P99Limit, "p99-limit", d.P99Limit, "overload: a step whose p99 reaches this is past the edge")
}
