package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicelabs/sluice/envoyrls"
)

// ENV mode: Sluice run where envoyproxy/ratelimit ran, as it ran. Envoy
// Gateway, Istio's and Contour's samples and ENV's compose file start the
// image with command ["/bin/ratelimit"] and configure it by environment
// variables alone, often as an arbitrary uid with a read-only root. So the
// binary started under the name "ratelimit", or with ENV's variables and no
// subcommand, runs `sluice serve --envoy-mode`:
//   - ENV's variables apply with ENV's defaults, even when none is set;
//   - no catalog database, no admin token, no console, no admin or check
//     API: nothing is written to disk;
//   - --addr is ENV's HTTP port: GET /healthcheck and POST /json, nothing
//     else (envoyproxy/ratelimit's stats to statsd or USE_PROMETHEUS's
//     PROMETHEUS_ADDR, Sluice's own metrics only on --metrics-addr);
//   - hits count as ENV counts them (--envoy-counting envoy).
// Sluice's own faces come back with `sluice serve`, or --envoy-mode=false.

// envoyModeName is the name ENV's image runs its binary under.
const envoyModeName = "ratelimit"

// envoyModeArgs returns the command line to run: args itself, or, for ENV
// mode, `serve --envoy-mode` followed by args' flags.
func envoyModeArgs(args []string, lookup func(string) (string, bool)) []string {
	if len(args) == 0 {
		return args
	}
	byName := strings.TrimSuffix(filepath.Base(args[0]), ".exe") == envoyModeName
	if !byName && (len(args) > 1 || !envoyrls.EnvIsRatelimit(lookup)) {
		return args
	}
	return append([]string{args[0], "serve", "--envoy-mode"}, args[1:]...)
}

// sluiceAPIFlags are serve's flags that configure Sluice's own API, which
// ENV mode does not run: giving one there is a mistake worth saying.
var sluiceAPIFlags = []string{"database", "admin-token", "admin-token-file", "console", "console-addr", "envoy-json-addr",
	"admin-timeout", "max-rules-per-tenant", "max-keys-per-tenant", "max-overrides-per-tenant", "access-log", "admin-write-limit", "console-signin-failures",
	"trusted-proxies", "audit-retention", "usage-flush", "usage-retention"}

// applyEnvoyMode sets up cmd's flags for ENV mode: ENV's variables with
// ENV's defaults, ENV's counting unless --envoy-counting says otherwise.
func applyEnvoyMode(cmd *cobra.Command, cfg *serveConfig) (envoyrls.EnvReport, error) {
	for _, name := range sluiceAPIFlags {
		if cmd.Flags().Changed(name) {
			return envoyrls.EnvReport{}, fmt.Errorf("--%s configures Sluice's own API, which --envoy-mode (the binary run as /bin/ratelimit, or with envoyproxy/ratelimit's variables and no subcommand) does not serve; run `sluice serve` for Sluice's API beside the Envoy service", name)
		}
	}
	report, err := envoyrls.ApplyEnvAsRatelimit(envFlags{cmd.Flags()}, os.LookupEnv)
	if err != nil {
		return report, err
	}
	if !cmd.Flags().Changed("envoy-counting") {
		cfg.EnvoyCounting = string(envoyrls.CountingEnvoy)
		if cfg.Redis == "" {
			report.Notes = append(report.Notes, "without Redis, hits count strictly (a denied request consumes nothing): counting every hit, as envoyproxy/ratelimit does, happens under its keys in Redis")
		}
	}
	if cfg.EnvoyConfig == "" && cfg.EnvoyXDSServer == "" {
		return report, fmt.Errorf("--envoy-mode serves Envoy's rate limit service, which needs its configuration: set RUNTIME_ROOT (default /srv/runtime_data/current) or --envoy-config to a directory of envoyproxy/ratelimit YAML files")
	}
	return report, nil
}
