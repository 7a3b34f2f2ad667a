package catalogfile

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicelabs/sluice"
)

// CatalogAdmin is a catalog database as an Admin, so a file is applied to
// the database directly as through a server (client.Domain): the commands
// that bootstrap a box before any server runs.
type CatalogAdmin struct{ sluice.Catalog }

// NewKey creates a key with a new secret, of which only the hash is stored.
func (b CatalogAdmin) NewKey(ctx context.Context, tenant, name string, role sluice.Role) (sluice.APIKey, string, error) {
	secret, hash := sluice.NewAPIKeySecret()
	k, err := b.CreateKey(ctx, tenant, name, role, hash)
	return k, secret, err
}

// Revoke revokes the key with that ID.
func (b CatalogAdmin) Revoke(ctx context.Context, tenant, id string) error {
	_, err := b.RevokeKey(ctx, tenant, id)
	return err
}

// FindKey finds a tenant's key by ID, or else by name among its unrevoked
// keys: a revoked key keeps its name, so a name may come back, and only an
// active key is worth revoking by name. A name two active keys share is an
// error listing their IDs.
func FindKey(ctx context.Context, c Admin, tenant, ref string) (sluice.APIKey, error) {
	ks, err := c.Keys(ctx, tenant)
	if err != nil {
		return sluice.APIKey{}, err
	}
	var named []sluice.APIKey
	for _, k := range ks {
		if k.ID == ref {
			return k, nil
		}
		if k.Name == ref && k.RevokedAt == nil {
			named = append(named, k)
		}
	}
	switch len(named) {
	case 1:
		return named[0], nil
	case 0:
		return sluice.APIKey{}, fmt.Errorf("tenant %s has no key with ID %q, nor an active key named %q; see sluice key list %s: %w",
			tenant, ref, ref, tenant, sluice.ErrNotFound)
	}
	ids := make([]string, 0, len(named))
	for _, k := range named {
		ids = append(ids, k.ID)
	}
	return sluice.APIKey{}, fmt.Errorf("tenant %s has %d active keys named %q (%s); revoke one by its ID",
		tenant, len(named), ref, strings.Join(ids, ", "))
}
