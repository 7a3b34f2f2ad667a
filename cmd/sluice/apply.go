package main

// sluice apply makes the catalog match a catalog file; sluice export writes
// the catalog as one. Both go through adminBackend, so they work on the
// catalog database and through a server's admin API alike, with the API's
// meaning of every field.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice/catalogfile"
	"github.com/sluicelabs/sluice/internal/atomicfile"
)

func init() {
	rootCmd.AddCommand(newApplyCmd(), newExportCmd())
}

func newExportCmd() *cobra.Command {
	var database, file, output string
	cmd := &cobra.Command{
		Use:   "export [-o FILE]",
		Short: "Write the catalog (tenants, key names, rules) as a catalog file for sluice apply",
		Long: `Write every tenant with its active keys' names and roles and its rules, in
the format sluice apply reads (docs/catalog-files.md). Secrets are never written:
the catalog holds only their hashes.

With -o FILE the file is replaced only once the whole export is written (a
temporary file beside it, renamed over it), so a failed export leaves the
previous file as it was; "> FILE" in a shell truncates it before sluice runs.`,
		Example: `  sluice export --server http://localhost:8080 -o catalog.yaml
  sluice export --database postgres://... > catalog.yaml`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" {
				if file != "" && file != output {
					return fmt.Errorf("-o %s and -f %s both given; give one", output, file)
				}
				file = output
			}
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
				return atomicfile.Write(file, data, 0o644)
			})
		},
	}
	addDatabaseFlag(cmd, &database)
	cmd.Flags().StringVarP(&output, "output", "o", "", "write to this file instead of stdout, replacing it only when complete")
	cmd.Flags().StringVarP(&file, "file", "f", "", "the same as -o")
	return cmd
}

func newApplyCmd() *cobra.Command {
	var (
		database, file     string
		dryRun, prune, yes bool
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE [--dry-run] [--prune [--yes]]",
		Short: "Make the catalog match a catalog file: create or update its tenants, keys and rules",
		Long: `Make the catalog match a catalog file (docs/catalog-files.md): create the tenants,
keys and rules it lists, update the tenants and rules that differ, and leave
the rest alone, unless --prune, which also deletes the rules and tenants and
revokes the keys the file does not list (only within tenants the file lists,
for rules and keys). Applying the same file twice changes nothing.

An empty or unreadable file is refused, and so is --prune of a file that
lists no tenant. Deleting tenants needs a confirmation: --yes, or the answer
"yes" when stdin is a terminal.

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
				if !dryRun && len(p) > 0 {
					if err := confirmTenantDeletes(cmd, p, yes); err != nil {
						return err
					}
				}
				return catalogfile.Apply(cmd.Context(), c, p, cmd.OutOrStdout(), dryRun, unreachable)
			})
		},
	}
	addDatabaseFlag(cmd, &database)
	cmd.Flags().StringVarP(&file, "file", "f", "", "the catalog file (- for stdin)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the changes without making them")
	cmd.Flags().BoolVar(&prune, "prune", false, "also delete tenants and rules, and revoke keys, that the file does not list")
	cmd.Flags().BoolVar(&yes, "yes", false, "with --prune, delete the tenants the file does not list without asking")
	return cmd
}

// confirmTenantDeletes lets a plan that deletes tenants go ahead only when
// the operator said so: --yes, or "yes" typed on a terminal. Whatever the
// answer, nothing has been changed yet.
func confirmTenantDeletes(cmd *cobra.Command, p []catalogfile.Step, yes bool) error {
	var doomed []string
	for _, s := range p {
		if s.DeletesTenant != "" {
			doomed = append(doomed, s.DeletesTenant)
		}
	}
	if len(doomed) == 0 || yes {
		return nil
	}
	what := fmt.Sprintf("--prune would delete %d tenants the file does not list, with their keys and rules: %s", len(doomed), strings.Join(doomed, ", "))
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); !ok || !onTerminal(f) {
		return fmt.Errorf("%s; nothing changed: add --yes to confirm (--dry-run shows every change)", what)
	}
	out := cmd.OutOrStdout()
	for _, s := range p {
		fmt.Fprintln(out, s.What)
	}
	fmt.Fprintf(out, "%s.\nType yes to apply these %d changes: ", what, len(p))
	answer, _ := bufio.NewReader(in).ReadString('\n')
	if strings.TrimSpace(answer) != "yes" {
		return errors.New("not confirmed; nothing changed")
	}
	return nil
}

// onTerminal reports whether f is a terminal (a character device), where a
// person can answer.
func onTerminal(f *os.File) bool {
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
