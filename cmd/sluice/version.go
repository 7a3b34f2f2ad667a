package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/sluicelabs/sluice/metrics"
)

// version and revision may be set at link time, for builds outside a module
// or a VCS checkout:
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.revision=abc123" ./cmd/sluice
var version, revision string

// buildVersion is what this binary says it is: the link-time values when
// set, else the module version and the VCS revision Go recorded in the
// build ("(devel)" and "unknown" when it recorded none).
func buildVersion() (ver, rev string) {
	ver, rev = version, revision
	info, ok := debug.ReadBuildInfo()
	if ver == "" && ok {
		ver = info.Main.Version
	}
	if rev == "" && ok {
		dirty := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" && dirty {
			rev += "-dirty"
		}
	}
	if ver == "" {
		ver = "(devel)"
	}
	if rev == "" {
		rev = "unknown"
	}
	return ver, rev
}

// versionLine is the one-line answer of `sluice version` and --version.
func versionLine() string {
	ver, rev := buildVersion()
	return fmt.Sprintf("sluice %s (revision %s, %s)", ver, rev, runtime.Version())
}

// buildInfoCollector is metrics.BuildInfo of this binary.
func buildInfoCollector() prometheus.Collector { return metrics.BuildInfo(buildVersion()) }

func init() {
	rootCmd.Version = versionLine()
	rootCmd.SetVersionTemplate("{{.Version}}\n")
	rootCmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version, VCS revision and Go version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionLine())
			return err
		},
	})
}
