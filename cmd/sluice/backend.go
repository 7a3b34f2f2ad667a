package main

// The catalog commands run against one of two backends: the catalog
// database itself (--database, for bootstrapping a box before any server
// runs) or a running server's admin API (--server, with --token). Both speak
// the domain types, so the commands print the same thing either way.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/catalogfile"
	"github.com/sluicelabs/sluice/client"
)

// remote holds the persistent root flags that send the catalog commands to
// a server.
var remote struct {
	server string
	token  string
}

func init() {
	f := rootCmd.PersistentFlags()
	f.StringVar(&remote.server, "server", "", "send tenant, key, rule, subject, apply and export commands to this server's admin API (http://host:8080) instead of --database")
	f.StringVar(&remote.token, "token", "", "with --server: the operator's admin token or a tenant admin key (SLUICE_TOKEN; the server's own is SLUICE_ADMIN_TOKEN)")
}

// adminBackend is what the catalog commands need, in domain types: what
// apply and export need, and one rule by name.
type adminBackend interface {
	catalogfile.Admin
	Rule(ctx context.Context, tenant, name string) (sluice.Rule, error)
	Override(ctx context.Context, tenant, rule, name string) (sluice.Override, error)
}

// access says whether a command only reads the catalog: a read never creates
// a catalog database that is not there.
type access bool

const (
	readOnly  access = true
	readWrite access = false
)

// withBackend runs fn on the backend the flags choose: the server's admin
// API with --server, else the catalog database of --database.
func withBackend(cmd *cobra.Command, database string, acc access, fn func(adminBackend) error) error {
	if remote.server == "" {
		return withDatabase(cmd.Context(), database, acc, func(c sluice.Catalog) error { return fn(catalogfile.CatalogAdmin{Catalog: c}) })
	}
	a, err := remoteAdmin(cmd)
	if err != nil {
		return err
	}
	return unreachable(fn(a.Domain()))
}

// unreachable rewrites a transport failure as one sentence about the server,
// instead of the client's method, URL and dial chain; the server's own
// answers (*client.Error) pass unchanged.
func unreachable(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("could not reach the server %s: %w", remote.server, ue.Err)
	}
	return err
}

// remoteAdmin is the admin API client of --server and --token.
func remoteAdmin(cmd *cobra.Command) (*client.Admin, error) {
	if f := cmd.Flags().Lookup("database"); f != nil && f.Changed {
		// Both given is a mistake worth stopping: the change would land in
		// one place while the operator looks for it in the other.
		return nil, errors.New("--server and --database both given; use --server to go through the admin API, or --database to write the catalog directly")
	}
	if remote.token == "" {
		return nil, errors.New("--server needs --token (or SLUICE_TOKEN): the operator's admin token or a tenant admin key")
	}
	a, err := client.NewAdmin(remote.server, remote.token)
	if err != nil {
		return nil, fmt.Errorf("--server: %w", err)
	}
	return a, nil
}

// withDatabase opens the catalog database, runs fn, and closes it. A write
// creates and migrates the catalog as needed; a read refuses a SQLite file
// that is not there rather than leave an empty catalog behind.
func withDatabase(ctx context.Context, database string, acc access, fn func(sluice.Catalog) error) error {
	if acc == readOnly {
		if path, ok := strings.CutPrefix(database, "sqlite://"); ok && path != "" {
			if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("the catalog database %s does not exist; create it with sluice migrate --database %s, or point --database (or --server) at the catalog in use", path, database)
			}
		}
	}
	return withCatalog(ctx, database, fn)
}
