package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelabs/sluice/bench"
)

// benchConfig is what sluice bench is configured with.
type benchConfig struct {
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
}

func init() { rootCmd.AddCommand(newBenchCmd()) }

func newBenchCmd() *cobra.Command {
	var cfg benchConfig
	cmd := &cobra.Command{
		Use:   "bench --api-key KEY --route ROUTE [--rate N | --concurrency N]",
		Short: "Load a running sluice serve's check API and report throughput and latency",
		Long: `Send checks to a running sluice serve (POST /v1/check) and report how many
were allowed and denied, the throughput, and latency percentiles.

--rate N runs the open model: N checks per second arrive whatever the service
does, and latency counts from when each was due (a slow service shows up as the
queueing its clients would see). Without --rate, --concurrency callers send
back to back (closed model). A 429 is an answer, not an error.

Subjects are drawn from --subjects distinct ones, --hot of the checks going to
one hot subject. After the run, the same load is sent to --reference (default
/healthz) on the same server: what the HTTP round trip alone costs on this
machine, to read the check's figures against. Run the generator on another
machine than the service when you can; on one machine they share the CPU.`,
		Example: `  sluice bench --api-key "$KEY" --route /api/payments/1 --rate 2000 --duration 20s
  sluice bench --api-key "$KEY" --route /api/orders --concurrency 32 --subjects 100000 --hot 0.2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBench(cmd.Context(), cfg, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.URL, "url", "http://127.0.0.1:8080", "base URL of the sluice serve to load")
	f.StringVar(&cfg.APIKey, "api-key", "", "a check API key of the tenant whose rule is exercised")
	f.StringVar(&cfg.Route, "route", "", "the route every check names (it selects the tenant's rule)")
	f.Int64Var(&cfg.Cost, "cost", 1, "cost of each check")
	f.Float64Var(&cfg.Rate, "rate", 0, "open model: checks per second (0: closed model)")
	f.IntVar(&cfg.Concurrency, "concurrency", 64, "closed model callers, or open model senders")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "length of each measured run")
	f.IntVar(&cfg.Subjects, "subjects", 10_000, "number of distinct subjects")
	f.Float64Var(&cfg.Hot, "hot", 0, "fraction of checks (0 to 1) that go to one hot subject")
	f.StringVar(&cfg.Reference, "reference", "/healthz", "path measured after the run with the same load, as the reference (empty: none)")
	f.BoolVar(&cfg.JSON, "json", false, "print the results as JSON")
	return cmd
}

// benchReport is one measured run, as printed.
type benchReport struct {
	Target     string  `json:"target"`
	Model      string  `json:"model"`
	Seconds    float64 `json:"seconds"`
	Sent       int64   `json:"sent"`
	Allowed    int64   `json:"allowed"`
	Denied     int64   `json:"denied"`
	Errors     int64   `json:"errors"`
	Late       int64   `json:"late"`
	Dropped    int64   `json:"dropped"`
	PerSecond  float64 `json:"per_second"`
	P50Ms      float64 `json:"p50_ms"`
	P90Ms      float64 `json:"p90_ms"`
	P99Ms      float64 `json:"p99_ms"`
	P999Ms     float64 `json:"p999_ms"`
	MaxMs      float64 `json:"max_ms"`
	FirstError string  `json:"first_error,omitempty"`
}

func newBenchReport(target string, r bench.Result) benchReport {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	rep := benchReport{
		Target: target, Model: r.Model, Seconds: r.Elapsed.Seconds(),
		Sent: r.Sent, Allowed: r.Allowed, Denied: r.Denied, Errors: r.Errors, Late: r.Late, Dropped: r.Dropped,
		PerSecond: r.Throughput(),
		P50Ms:     ms(r.Percentile(0.5)), P90Ms: ms(r.Percentile(0.9)), P99Ms: ms(r.Percentile(0.99)),
		P999Ms: ms(r.Percentile(0.999)), MaxMs: ms(r.Max()),
	}
	if r.FirstError != nil {
		rep.FirstError = r.FirstError.Error()
	}
	return rep
}

func (c benchConfig) validate() error {
	if c.APIKey == "" {
		return errors.New("--api-key is required: create a check key with `sluice key create TENANT --role check`")
	}
	if c.Route == "" {
		return errors.New("--route is required: the route selects the tenant's rule to exercise")
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--url %q must be an http:// or https:// base URL such as http://127.0.0.1:8080", c.URL)
	}
	if c.Reference != "" && !strings.HasPrefix(c.Reference, "/") {
		return fmt.Errorf("--reference %q must be a path starting with /", c.Reference)
	}
	if c.Cost < 0 {
		return fmt.Errorf("--cost must not be negative, got %d", c.Cost)
	}
	return nil
}

func runBench(ctx context.Context, cfg benchConfig, out io.Writer) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	base := strings.TrimRight(cfg.URL, "/")
	opts := bench.Options{Rate: cfg.Rate, Concurrency: cfg.Concurrency, Duration: cfg.Duration, Subjects: cfg.Subjects, HotFraction: cfg.Hot}

	check := bench.NewHTTPCheck(base, cfg.APIKey, cfg.Route, cfg.Cost, cfg.Concurrency)
	// One check first, so a wrong key or URL fails at once with the reason.
	if _, err := check.Do(ctx, "sluice-bench-probe"); err != nil {
		return fmt.Errorf("first check failed, not starting the run: %w", err)
	}
	res, err := bench.Run(ctx, check, opts)
	if err != nil {
		return err
	}
	reports := []benchReport{newBenchReport("POST /v1/check "+cfg.Route, res)}
	if cfg.Reference != "" && ctx.Err() == nil {
		ref, err := bench.Run(ctx, bench.NewHTTPGet(base+cfg.Reference, cfg.Concurrency), opts)
		if err != nil {
			return err
		}
		reports = append(reports, newBenchReport("GET "+cfg.Reference+" (reference)", ref))
	}
	if cfg.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	}
	printBench(out, cfg, reports)
	return nil
}

func printBench(out io.Writer, cfg benchConfig, reports []benchReport) {
	load := fmt.Sprintf("closed model, %d callers", cfg.Concurrency)
	if cfg.Rate > 0 {
		load = fmt.Sprintf("open model, %.0f/s offered by %d senders", cfg.Rate, cfg.Concurrency)
	}
	fmt.Fprintf(out, "%s for %v; %d subjects, %.0f%% to one hot subject\n\n", load, cfg.Duration, cfg.Subjects, cfg.Hot*100)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tanswered/s\tallowed\tdenied\terrors\tlate\tdropped\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\t")
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%.0f\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n",
			r.Target, r.PerSecond, r.Allowed, r.Denied, r.Errors, r.Late, r.Dropped, r.P50Ms, r.P90Ms, r.P99Ms, r.P999Ms, r.MaxMs)
	}
	tw.Flush()
	for _, r := range reports {
		if r.FirstError != "" {
			fmt.Fprintf(out, "\n%s: %d errors; the first: %s\n", r.Target, r.Errors, r.FirstError)
		}
	}
	if len(reports) == 2 && reports[1].P50Ms > 0 && reports[1].PerSecond > 0 {
		fmt.Fprintf(out, "\ncheck / reference: p50 %.2f×, p99 %.2f×, throughput %.2f×\n",
			reports[0].P50Ms/reports[1].P50Ms, reports[0].P99Ms/max(reports[1].P99Ms, 0.001), reports[0].PerSecond/reports[1].PerSecond)
	}
}
