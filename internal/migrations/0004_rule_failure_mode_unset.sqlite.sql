-- A rule may be stored without a failure mode (''): every instance then
-- applies its own --default-failure-mode at check time, whoever wrote the
-- rule (the admin API or the CLI on the database).
--
-- SQLite cannot alter a CHECK constraint, so the table is rebuilt. Its
-- limits are set aside first: with foreign keys on, dropping rules would
-- cascade into any table that references it.
CREATE TABLE rules_new (
    tenant        TEXT    NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    name          TEXT    NOT NULL,
    route         TEXT    NOT NULL,
    failure_mode  TEXT    NOT NULL CHECK (failure_mode IN ('', 'closed', 'open', 'local')),
    shadow        BOOLEAN NOT NULL,
    updated_at_ms BIGINT  NOT NULL,
    PRIMARY KEY (tenant, name),
    UNIQUE (tenant, route)
);
INSERT INTO rules_new SELECT tenant, name, route, failure_mode, shadow, updated_at_ms FROM rules;
CREATE TABLE rule_limits_kept AS SELECT * FROM rule_limits;
DROP TABLE rule_limits;
DROP TABLE rules;
ALTER TABLE rules_new RENAME TO rules;
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
INSERT INTO rule_limits SELECT tenant, rule, ordinal, name, algorithm, capacity, refill_per_second, window_ms FROM rule_limits_kept;
DROP TABLE rule_limits_kept;
