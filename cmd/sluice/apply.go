package main

// sluice apply makes the catalog match a catalog file; sluice export writes
// the catalog as one. Both go through adminBackend, so they work on the
// catalog database and through a server's admin API alike, with the API's
// meaning of every field.

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice/catalogfile"
)

func init() {
	rootCmd.AddCommand(newApplyCmd(), newExportCmd())
}

func newExportCmd() *cobra.Command {
	var database, file string
	cmd := &cobra.Command{
		Use:   "export [-f FILE]",
		Short: "Write the catalog (tenants, key names, rules) as a catalog file for sluice apply",
		Long: `Write every tenant with its active keys' names and roles and its rules, in
the format sluice apply reads (docs/catalog-files.md). Secrets are never written:
the catalog holds only their hashes.`,
		Example: `  sluice export --server http://localhost:8080 > catalog.yaml
  sluice export --database postgres://... -f catalog.yaml`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withBackend(cmd, database, readOnly, func(c adminBackend) error {
				ts, err := catalogfile.Read(cmd.Context(), c)
				if err != nil {
					return err
				}
				data, err := yaml.Marshal(catalogfile.Export(ts))
				if err != nil {
					return err
				}
				if file == "" || file == "-" {
					_, err = cmd.OutOrStdout().Write(data)
					return err
				}
				return os.WriteFile(file, data, 0o644)
			})
		},
	}
	addDatabaseFlag(cmd, &database)
	cmd.Flags().StringVarP(&file, "file", "f", "", "write to this file instead of stdout")
	return cmd
}

func newApplyCmd() *cobra.Command {
	var (
		database, file string
		dryRun, prune  bool
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE [--dry-run] [--prune]",
		Short: "Make the catalog match a catalog file: create or update its tenants, keys and rules",
		Long: `Make the catalog match a catalog file (docs/catalog-files.md): create the tenants,
keys and rules it lists, update the tenants and rules that differ, and leave
the rest alone, unless --prune, which also deletes the rules and tenants and
revokes the keys the file does not list (only within tenants the file lists,
for rules and keys). Applying the same file twice changes nothing.

Every change is printed (+ create, ~ update, - delete). A created key's
secret is printed once, on stdout; the file never holds secrets.

The whole file is read and checked, and the changes worked out, before the
first write. The catalog has no transaction across calls: if a write fails
(a route taken, the server gone), apply stops there, says what it applied
and what it did not, and running it again finishes the job.`,
		Example: `  sluice apply -f catalog.yaml --dry-run
  sluice apply -f catalog.yaml --server http://sluice.internal:8080
  sluice apply -f catalog.yaml --prune --database postgres://...`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return fmt.Errorf("apply needs -f FILE: a catalog file as sluice export writes it (docs/catalog-files.md)")
			}
			var data []byte
			var err error
			if file == "-" {
				data, err = io.ReadAll(cmd.InOrStdin())
			} else {
				data, err = os.ReadFile(file)
			}
			if err != nil {
				return fmt.Errorf("read the catalog file: %w", err)
			}
			desired, err := catalogfile.Parse(file, data)
			if err != nil {
				return err
			}
			acc := readWrite
			if dryRun {
				acc = readOnly
			}
			return withBackend(cmd, database, acc, func(c adminBackend) error {
				current, err := catalogfile.Read(cmd.Context(), c)
				if err != nil {
					return err
				}
				p, err := catalogfile.Plan(desired, current, prune)
				if err != nil {
					return err
				}
				return catalogfile.Apply(cmd.Context(), c, p, cmd.OutOrStdout(), dryRun, unreachable)
			})
		},
	}
	addDatabaseFlag(cmd, &database)
	cmd.Flags().StringVarP(&file, "file", "f", "", "the catalog file (- for stdin)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the changes without making them")
	cmd.Flags().BoolVar(&prune, "prune", false, "also delete tenants and rules, and revoke keys, that the file does not list")
	return cmd
}
