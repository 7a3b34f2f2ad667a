-- A tenant's generation is the catalog version that created it, and names its
-- counters (sluice.Tenant.CounterNamespace): unlike its creation time, it can
-- never repeat. Tenants created before this step keep NULL, and with it their
-- namespace of name and creation time, so their counters carry over.
ALTER TABLE tenants ADD COLUMN generation BIGINT;
