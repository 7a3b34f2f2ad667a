// Command sluice is the Sluice rate limiter: the multi-tenant rate-limit
// service (sluice serve), its catalog administration (sluice tenant, key,
// rule, subject, migrate; through a server's admin API with --server, or on
// the catalog database), sluice check, and the other faces other files of
// this package add.
//
// Every flag can also be given as an environment variable SLUICE_<FLAG>, the
// flag name upper-cased with '-' replaced by '_' (--admin-token ↔
// SLUICE_ADMIN_TOKEN). A flag given on the command line wins over the
// environment.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicelabs/sluice"
)

// rootCmd is the sluice command. Other files of this package add their
// subcommands with func init() { rootCmd.AddCommand(...) }.
var rootCmd = &cobra.Command{
	Use:   "sluice",
	Short: "Sluice: a distributed rate limiter (service, gateway, Envoy rate-limit server)",
	Long: `Sluice decides, for every request an API receives, whether it may go through.

The tenant, key, rule and subject commands go through a running server's admin
API with --server and --token (SLUICE_SERVER, SLUICE_TOKEN), or straight to the
catalog database with --database, for bootstrapping; sluice check asks a
running server for a decision.

Every flag can also be set with an environment variable SLUICE_<FLAG>: the flag
name upper-cased with '-' replaced by '_' (for example --admin-token is
SLUICE_ADMIN_TOKEN). A flag given on the command line wins.`,
	SilenceUsage:  true,
	SilenceErrors: true,
	PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
		// Catalog changes a command makes on the database directly are the
		// operator's in the audit log: whoever can open it is one.
		cmd.SetContext(sluice.WithActor(cmd.Context(), sluice.ActorOperator))
		return bindEnv(cmd)
	},
}

// envPrefix starts the name of every environment variable that mirrors a flag.
const envPrefix = "SLUICE_"

// envName is the environment variable that mirrors the flag named flag.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// bindEnv sets every flag of cmd (its own and those inherited from parents)
// that was not given on the command line from its SLUICE_<FLAG> environment
// variable, when that is set. A subcommand that declares its own
// PersistentPreRunE must call bindEnv itself, since cobra runs only the
// nearest one. Calling it twice is harmless: a flag set once counts as given.
func bindEnv(cmd *cobra.Command) error {
	var errs []error
	apply := func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		value, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if err := cmd.Flags().Set(f.Name, value); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s=%q is not a valid value for --%s: %w", envName(f.Name), value, f.Name, err))
			return
		}
		_ = cmd.Flags().SetAnnotation(f.Name, fromEnvAnnotation, []string{envName(f.Name)})
	}
	// Once parsed, Flags() holds the command's own flags and the inherited ones.
	cmd.Flags().VisitAll(apply)
	return errors.Join(errs...)
}

// fromEnvAnnotation marks a flag bindEnv set from the environment.
const fromEnvAnnotation = "sluice-from-env"

// flagOrigin says where the value of cmd's flag name came from: "env" when
// bindEnv set it from SLUICE_<FLAG>, "flag" otherwise.
func flagOrigin(cmd *cobra.Command, name string) string {
	if f := cmd.Flags().Lookup(name); f != nil && len(f.Annotations[fromEnvAnnotation]) > 0 {
		return "env"
	}
	return "flag"
}

func main() {
	tuneGC()
	// The first signal starts a graceful shutdown; a second one ends the
	// process at once instead of waiting out --drain-period and
	// --shutdown-timeout. One channel receives both, so a second signal
	// that arrives right after the first is never lost.
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		<-signals
		stop()
		sig := <-signals
		fmt.Fprintf(os.Stderr, "sluice: second signal (%v): stopping at once\n", sig)
		os.Exit(1)
	}()
	// Run as /bin/ratelimit, or with its variables and no subcommand, the
	// binary is envoyproxy/ratelimit's drop-in (envmode.go).
	rootCmd.SetArgs(envoyModeArgs(os.Args, os.LookupEnv)[1:])
	err := rootCmd.ExecuteContext(ctx)
	stop()
	var code exitCode
	if errors.As(err, &code) {
		os.Exit(int(code))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

// gcPercent is the GC target the process runs with when GOGC is unset: the
// heap may grow to 3x what is live between collections instead of Go's
// default 2x. Under Envoy gRPC load, collection was about 9% of the CPU and
// this took the allow path's server CPU per check to about 0.9x, for about
// 13% more resident memory (BENCHMARKS.md, "gRPC server options one by one,
// the GC target"); GOMEMLIMIT, when set, still bounds the heap whatever the
// target. GOGC, when set, wins.
const gcPercent = 200

func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
}
