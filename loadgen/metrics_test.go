package loadgen_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicelabs/sluice/loadgen"
)

func TestProcessCPUReadsThePrometheusCounter(t *testing.T) {
	// A real registry with the process collector, as sluice serve has, so a
	// change in what promhttp serves by default shows up here.
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv := httptest.NewServer(promhttp.HandlerFor(registry, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	defer srv.Close()
	// Burn some CPU so the counter is past its first 10 ms tick.
	for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline); {
	}
	got, err := loadgen.NewProcessCPU(srv.URL).Seconds(context.Background())
	if err != nil || got <= 0 {
		t.Fatalf("process_cpu_seconds_total: %v, %v", got, err)
	}
}

func TestProcessCPUSaysWhatIsMissing(t *testing.T) {
	pages := map[string]string{
		"/absent":    "# TYPE go_goroutines gauge\ngo_goroutines 7\n",
		"/malformed": "process_cpu_seconds_total{ 1\n",
		"/two":       "process_cpu_seconds_total{pid=\"1\"} 1\nprocess_cpu_seconds_total{pid=\"2\"} 2\n",
		"/untyped":   "process_cpu_seconds_total 12.5\n",
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page, ok := pages[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, page)
	}))
	defer srv.Close()
	ctx := context.Background()
	for path, says := range map[string]string{
		"/absent":    "does not serve process_cpu_seconds_total",
		"/malformed": "not the Prometheus text format",
		"/two":       "2 series",
		"/nowhere":   "HTTP 404",
	} {
		if _, err := loadgen.NewProcessCPU(srv.URL + path).Seconds(ctx); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: got %v, want an error saying %q", path, err, says)
		}
	}
	if got, err := loadgen.NewProcessCPU(srv.URL + "/untyped").Seconds(ctx); err != nil || got != 12.5 {
		t.Errorf("a counter without TYPE: %v, %v", got, err)
	}
}

func TestRunReportsCPUPerAnsweredRequest(t *testing.T) {
	target := loadgen.TargetFunc(func(ctx context.Context, subject string) (loadgen.Outcome, error) {
		if subject == "hot" {
			return loadgen.Shed, nil
		}
		return loadgen.Allowed, nil
	})
	// A counter that advances 1 s per reading: the run sees exactly 1 s.
	var readings atomic.Int64
	cpu := func(context.Context) (float64, error) { return float64(readings.Add(1)), nil }
	res, err := loadgen.Run(context.Background(), target, loadgen.Options{Concurrency: 2, Duration: 50 * time.Millisecond, HotFraction: 0.5, CPU: cpu})
	if err != nil {
		t.Fatal(err)
	}
	if !res.CPUMeasured || res.CPUSeconds != 1 || readings.Load() != 2 {
		t.Fatalf("CPU not read around the run: %+v, %d readings", res, readings.Load())
	}
	// Shed requests are not in the denominator.
	if want := time.Duration(float64(time.Second) / float64(res.Allowed)); res.CPUPerAnswer() != want || res.Shed == 0 {
		t.Fatalf("CPU per answer %v, want %v (allowed %d, shed %d)", res.CPUPerAnswer(), want, res.Allowed, res.Shed)
	}

	failing := func(context.Context) (float64, error) { return 0, fmt.Errorf("no metrics") }
	res, err = loadgen.Run(context.Background(), target, loadgen.Options{Concurrency: 1, Duration: 10 * time.Millisecond, CPU: failing})
	if err != nil {
		t.Fatal(err)
	}
	if res.CPUMeasured || res.CPUError == nil || res.CPUPerAnswer() != 0 {
		t.Fatalf("a failed CPU reading must leave CPU out with the reason: %+v", res)
	}
}
