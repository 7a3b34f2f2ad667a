-- The audit log: every catalog change, who made it (operator, system or an
-- API key ID), what it was, the thing changed before and after (JSON, without
-- secrets), and when. It outlives what it describes: no foreign keys.
-- tenant_generation tells a tenant's entries from those of a deleted
-- namesake (0 for tenants created before generations were recorded).
ALTER TABLE catalog_state ADD COLUMN audit_seq BIGINT NOT NULL DEFAULT 0;

CREATE TABLE audit_log (
    id                BIGINT PRIMARY KEY,
    at_ms             BIGINT NOT NULL,
    actor             TEXT   NOT NULL,
    tenant            TEXT   NOT NULL,
    tenant_generation BIGINT NOT NULL,
    action            TEXT   NOT NULL,
    target            TEXT   NOT NULL,
    before_json       TEXT,
    after_json        TEXT
);
CREATE INDEX audit_log_tenant ON audit_log (tenant, id);
