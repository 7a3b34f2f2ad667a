package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/catalogdb"
)

// envTenantCaps are the per-tenant caps of a catalog opened outside sluice
// serve (the command line's --database path, apply): those of
// SLUICE_MAX_RULES_PER_TENANT, SLUICE_MAX_KEYS_PER_TENANT and
// SLUICE_MAX_OVERRIDES_PER_TENANT, as serve reads
// them, else the defaults. The catalog enforces them, whoever writes.
func envTenantCaps() (sluice.TenantCaps, error) {
	var caps sluice.TenantCaps
	for _, c := range []struct {
		flag string
		to   *int
	}{{"max-rules-per-tenant", &caps.Rules}, {"max-keys-per-tenant", &caps.Keys}, {"max-overrides-per-tenant", &caps.Overrides}} {
		v, ok := os.LookupEnv(envName(c.flag))
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return caps, fmt.Errorf("environment variable %s=%q is not a number", envName(c.flag), v)
		}
		*c.to = n
	}
	return caps, nil
}

// openCatalog opens the catalog named by a database URL (catalogdb.Open)
// with the caps of the environment.
func openCatalog(ctx context.Context, url string) (catalogdb.Catalog, error) {
	caps, err := envTenantCaps()
	if err != nil {
		return nil, err
	}
	c, err := catalogdb.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	c.SetTenantCaps(caps)
	return c, nil
}

// openMigratedCatalog opens the catalog and applies pending migrations.
func openMigratedCatalog(ctx context.Context, url string) (catalogdb.Catalog, error) {
	c, err := openCatalog(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := c.Migrate(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("apply catalog migrations: %w", err)
	}
	return c, nil
}
