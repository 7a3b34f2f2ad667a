-- A rule may be stored without a failure mode (''): every instance then
-- applies its own --default-failure-mode at check time, whoever wrote the
-- rule (the admin API or the CLI on the database).
ALTER TABLE rules DROP CONSTRAINT rules_failure_mode_check;
ALTER TABLE rules ADD CONSTRAINT rules_failure_mode_check CHECK (failure_mode IN ('', 'closed', 'open', 'local'));
