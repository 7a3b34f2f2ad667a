-- The catalog: tenants, their API keys and rules, and the counters that tell
-- instances something changed. Written in the SQL both PostgreSQL and SQLite
-- accept, so one file serves both. Times are Unix milliseconds.

-- One row. version is bumped by every catalog change (instances reload their
-- snapshot when it moves); reset_seq numbers subject resets.
CREATE TABLE catalog_state (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    version   BIGINT  NOT NULL,
    reset_seq BIGINT  NOT NULL
);
INSERT INTO catalog_state (id, version, reset_seq) VALUES (1, 0, 0);

CREATE TABLE tenants (
    name          TEXT   PRIMARY KEY,
    status        TEXT   NOT NULL CHECK (status IN ('active', 'suspended')),
    created_at_ms BIGINT NOT NULL
);

-- key_hash is the hex SHA-256 of the secret; the secret itself is never stored.
-- created_version (the catalog version that created the key) orders keys
-- created within one millisecond.
CREATE TABLE api_keys (
    id            TEXT   PRIMARY KEY,
    tenant        TEXT   NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    name          TEXT   NOT NULL,
    role          TEXT   NOT NULL CHECK (role IN ('check', 'admin')),
    key_hash      TEXT   NOT NULL UNIQUE,
    created_at_ms   BIGINT NOT NULL,
    created_version BIGINT NOT NULL,
    revoked_at_ms   BIGINT
);
-- A name may be reused once the key holding it is revoked.
CREATE UNIQUE INDEX api_keys_active_name ON api_keys (tenant, name) WHERE revoked_at_ms IS NULL;

-- route is unique per tenant so matching is never ambiguous.
CREATE TABLE rules (
    tenant        TEXT    NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    name          TEXT    NOT NULL,
    route         TEXT    NOT NULL,
    failure_mode  TEXT    NOT NULL CHECK (failure_mode IN ('closed', 'open', 'local')),
    shadow        BOOLEAN NOT NULL,
    updated_at_ms BIGINT  NOT NULL,
    PRIMARY KEY (tenant, name),
    UNIQUE (tenant, route)
);

-- The limits of a rule, in order. capacity is the token bucket's size or the
-- window's limit; refill_per_second is 0 for windows, window_ms 0 for buckets.
CREATE TABLE rule_limits (
    tenant            TEXT             NOT NULL,
    rule              TEXT             NOT NULL,
    ordinal           INTEGER          NOT NULL,
    name              TEXT             NOT NULL,
    algorithm         TEXT             NOT NULL,
    capacity          BIGINT           NOT NULL,
    refill_per_second DOUBLE PRECISION NOT NULL,
    window_ms         BIGINT           NOT NULL,
    PRIMARY KEY (tenant, rule, ordinal),
    FOREIGN KEY (tenant, rule) REFERENCES rules (tenant, name) ON DELETE CASCADE
);

-- Process-wide settings; admin_token_hash holds the hex SHA-256 of the
-- operator token.
CREATE TABLE settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- Recent subject resets, numbered by catalog_state.reset_seq, so an instance
-- that missed a notification still drops its deny-cache entries. Rows older
-- than a few minutes are pruned.
CREATE TABLE subject_resets (
    id            BIGINT PRIMARY KEY,
    tenant        TEXT   NOT NULL,
    rule          TEXT   NOT NULL,
    subject       TEXT   NOT NULL,
    created_at_ms BIGINT NOT NULL
);
