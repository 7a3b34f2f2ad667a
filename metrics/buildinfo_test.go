package metrics_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicelabs/sluice/metrics"
)

func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.BuildInfo("v1.2.3", "abc123"))
	want := `# HELP sluice_build_info Always 1; the labels say which build of Sluice is running.
# TYPE sluice_build_info gauge
sluice_build_info{goversion="` + runtime.Version() + `",revision="abc123",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_build_info"); err != nil {
		t.Fatal(err)
	}
}
