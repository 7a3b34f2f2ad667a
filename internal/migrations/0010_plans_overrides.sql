-- Plans and per-subject overrides (issue 23). A rule's plans are its named
-- limit sets; an override gives the subjects it names (exact values or
-- "prefix*" patterns) other limits on one rule, until expires_at_ms (NULL:
-- never). Their limits are JSON in the admin API's form (package adminapi),
-- which only ever gains fields, so a limit with new parameters needs no new
-- columns here.
ALTER TABLE rules ADD COLUMN plans_json TEXT NOT NULL DEFAULT '';
CREATE TABLE rule_overrides (
    tenant        TEXT   NOT NULL,
    rule          TEXT   NOT NULL,
    name          TEXT   NOT NULL,
    subjects_json TEXT   NOT NULL,
    limits_json   TEXT   NOT NULL,
    expires_at_ms BIGINT,
    updated_at_ms BIGINT NOT NULL,
    -- Its first column also serves the per-tenant count of the cap.
    PRIMARY KEY (tenant, rule, name),
    FOREIGN KEY (tenant, rule) REFERENCES rules (tenant, name) ON DELETE CASCADE
);
