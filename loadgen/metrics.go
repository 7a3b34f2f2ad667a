package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// CPUMetric is the standard Prometheus process collector's counter of the
// CPU time (user and system) the process has used.
const CPUMetric = "process_cpu_seconds_total"

// ProcessCPU reads a service's CPU seconds from its Prometheus metrics page.
type ProcessCPU struct {
	client *http.Client
	url    string
}

// NewProcessCPU returns a reader of CPUMetric at url (such as
// http://host:8080/metrics).
func NewProcessCPU(url string) *ProcessCPU {
	return &ProcessCPU{client: &http.Client{Timeout: 5 * time.Second}, url: url}
}

// Seconds fetches the metrics page and returns the CPU counter. The counter
// comes from /proc in clock ticks (10 ms on Linux), so differences over less
// than a few seconds of load are coarse.
func (p *ProcessCPU) Seconds(ctx context.Context) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return 0, err
	}
	// Ask for the text format: without it a Prometheus handler may answer
	// in the protobuf or OpenMetrics format.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", CPUMetric, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return 0, fmt.Errorf("read %s: GET %s: HTTP %d", CPUMetric, p.url, resp.StatusCode)
	}
	return parseCPU(resp.Body, p.url)
}

// parseCPU finds CPUMetric in a Prometheus text exposition.
func parseCPU(r io.Reader, url string) (float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return 0, fmt.Errorf("read %s: %s is not the Prometheus text format: %w", CPUMetric, url, err)
	}
	mf, ok := families[CPUMetric]
	if !ok || len(mf.GetMetric()) == 0 {
		return 0, fmt.Errorf("%s does not serve %s: the server needs the Prometheus process collector (sluice serve registers it)", url, CPUMetric)
	}
	if len(mf.GetMetric()) > 1 {
		return 0, fmt.Errorf("%s serves %d series of %s, expected one process", url, len(mf.GetMetric()), CPUMetric)
	}
	m := mf.GetMetric()[0]
	switch mf.GetType() {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue(), nil
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue(), nil
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue(), nil
	}
	return 0, fmt.Errorf("%s serves %s as a %v, expected a counter", url, CPUMetric, mf.GetType())
}
