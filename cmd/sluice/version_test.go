package main

import (
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var versionPattern = regexp.MustCompile(`^sluice \S+ \(revision \S+, go[0-9.]+\S*\)\n$`)

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, _, err := runCLI(t, args...)
		if err != nil || !versionPattern.MatchString(out) {
			t.Errorf("sluice %s: %q, %v; want one line like \"sluice v1.2.3 (revision abc, go1.26)\"", strings.Join(args, " "), out, err)
		}
	}
	t.Run("link_time_values_win", func(t *testing.T) {
		defer func(v, r string) { version, revision = v, r }(version, revision)
		version, revision = "v9.8.7", "cafe"
		if ver, rev := buildVersion(); ver != "v9.8.7" || rev != "cafe" {
			t.Fatalf("buildVersion() = %s, %s; want the -X values", ver, rev)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(buildInfoCollector())
		want := `
# HELP sluice_build_info Always 1; the labels say which build of Sluice is running.
# TYPE sluice_build_info gauge
sluice_build_info{goversion="` + runtime.Version() + `",revision="cafe",version="v9.8.7"} 1
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_build_info"); err != nil {
			t.Fatal(err)
		}
	})
}
