-- Usage rollups keyed by a small series id instead of the namespace and rule
-- text on every row (a rule's day of minutes was 287 KB, over the 200 KB
-- goal), and kept at three steps: minutes for --usage-retention, hours and
-- days longer. Every flush adds to all three in one transaction, so each
-- step is an exact sum on its own and older minutes can go.
CREATE TABLE usage_series (
    id        INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    rule      TEXT NOT NULL,
    UNIQUE (namespace, rule)
);
-- start is the period's first minute, counted in minutes since 1970 UTC.
CREATE TABLE usage_by_minute (
    series        INTEGER NOT NULL REFERENCES usage_series (id) ON DELETE CASCADE,
    start         INTEGER NOT NULL,
    allowed       BIGINT  NOT NULL DEFAULT 0,
    denied        BIGINT  NOT NULL DEFAULT 0,
    shadow_denied BIGINT  NOT NULL DEFAULT 0,
    degraded      BIGINT  NOT NULL DEFAULT 0,
    shed          BIGINT  NOT NULL DEFAULT 0,
    units         BIGINT  NOT NULL DEFAULT 0,
    PRIMARY KEY (series, start)
);
CREATE TABLE usage_by_hour (
    series        INTEGER NOT NULL REFERENCES usage_series (id) ON DELETE CASCADE,
    start         INTEGER NOT NULL,
    allowed       BIGINT  NOT NULL DEFAULT 0,
    denied        BIGINT  NOT NULL DEFAULT 0,
    shadow_denied BIGINT  NOT NULL DEFAULT 0,
    degraded      BIGINT  NOT NULL DEFAULT 0,
    shed          BIGINT  NOT NULL DEFAULT 0,
    units         BIGINT  NOT NULL DEFAULT 0,
    PRIMARY KEY (series, start)
);
CREATE TABLE usage_by_day (
    series        INTEGER NOT NULL REFERENCES usage_series (id) ON DELETE CASCADE,
    start         INTEGER NOT NULL,
    allowed       BIGINT  NOT NULL DEFAULT 0,
    denied        BIGINT  NOT NULL DEFAULT 0,
    shadow_denied BIGINT  NOT NULL DEFAULT 0,
    degraded      BIGINT  NOT NULL DEFAULT 0,
    shed          BIGINT  NOT NULL DEFAULT 0,
    units         BIGINT  NOT NULL DEFAULT 0,
    PRIMARY KEY (series, start)
);
-- The heaviest subjects of a rule's hour, by denials and by units, as each
-- instance last wrote them (its figures so far in the hour, replaced at
-- every flush); a query sums the instances.
CREATE TABLE usage_top (
    series   INTEGER NOT NULL REFERENCES usage_series (id) ON DELETE CASCADE,
    start    INTEGER NOT NULL,
    instance TEXT    NOT NULL,
    subject  TEXT    NOT NULL,
    denied   BIGINT  NOT NULL,
    units    BIGINT  NOT NULL
);
-- Not unique on (instance, subject): a flush deletes its instance's rows of
-- an hour before it writes them, and the narrower key halves the table.
CREATE INDEX usage_top_hour ON usage_top (series, start);
-- Minutes [start, stop) whose counts an instance dropped (its buffer was
-- full while the database could not be written): the sums there are short.
CREATE TABLE usage_gaps (
    series INTEGER NOT NULL REFERENCES usage_series (id) ON DELETE CASCADE,
    start  INTEGER NOT NULL,
    stop   INTEGER NOT NULL
);
CREATE INDEX usage_gaps_start ON usage_gaps (series, start);

INSERT INTO usage_series (namespace, rule) SELECT DISTINCT namespace, rule FROM usage_minutes;
INSERT INTO usage_by_minute SELECT s.id, (m.minute_ms / 60000),
    m.allowed, m.denied, m.shadow_denied, m.degraded, m.shed, m.units
    FROM usage_minutes m JOIN usage_series s ON s.namespace = m.namespace AND s.rule = m.rule;
INSERT INTO usage_by_hour SELECT series, start / 60 * 60, SUM(allowed), SUM(denied), SUM(shadow_denied),
    SUM(degraded), SUM(shed), SUM(units) FROM usage_by_minute GROUP BY series, start / 60 * 60;
INSERT INTO usage_by_day SELECT series, start / 1440 * 1440, SUM(allowed), SUM(denied), SUM(shadow_denied),
    SUM(degraded), SUM(shed), SUM(units) FROM usage_by_minute GROUP BY series, start / 1440 * 1440;
DROP TABLE usage_minutes;
