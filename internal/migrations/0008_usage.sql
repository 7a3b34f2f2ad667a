-- Per-minute usage rollups (package usage): every instance adds its counts
-- to the row of (namespace, rule, minute), so the fleet's are exact sums.
CREATE TABLE usage_minutes (
    namespace     TEXT   NOT NULL,
    rule          TEXT   NOT NULL,
    minute_ms     BIGINT NOT NULL,
    allowed       BIGINT NOT NULL DEFAULT 0,
    denied        BIGINT NOT NULL DEFAULT 0,
    shadow_denied BIGINT NOT NULL DEFAULT 0,
    degraded      BIGINT NOT NULL DEFAULT 0,
    shed          BIGINT NOT NULL DEFAULT 0,
    units         BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, rule, minute_ms)
);
-- Retention deletes by age across every rule.
CREATE INDEX usage_minutes_minute ON usage_minutes (minute_ms);
