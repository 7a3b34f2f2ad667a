-- A key may have the metrics role: it reads /metrics, its tenant's series only.
--
-- SQLite cannot alter a CHECK constraint, so the table is rebuilt (no table
-- references api_keys, so nothing cascades).
CREATE TABLE api_keys_new (
    id            TEXT   PRIMARY KEY,
    tenant        TEXT   NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    name          TEXT   NOT NULL,
    role          TEXT   NOT NULL CHECK (role IN ('check', 'admin', 'metrics')),
    key_hash      TEXT   NOT NULL UNIQUE,
    created_at_ms   BIGINT NOT NULL,
    created_version BIGINT NOT NULL,
    revoked_at_ms   BIGINT
);
INSERT INTO api_keys_new SELECT id, tenant, name, role, key_hash, created_at_ms, created_version, revoked_at_ms FROM api_keys;
DROP TABLE api_keys;
ALTER TABLE api_keys_new RENAME TO api_keys;
CREATE UNIQUE INDEX api_keys_active_name ON api_keys (tenant, name) WHERE revoked_at_ms IS NULL;
