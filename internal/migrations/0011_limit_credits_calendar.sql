-- Credits limits and calendar windows (issue 23): a credits limit's refill
-- schedule ('' none; see sluice.RefillColumn), and a fixed_window's calendar
-- period ('day', 'month'; '' a window of window_ms) in time_zone ('' UTC).
ALTER TABLE rule_limits ADD COLUMN refill TEXT NOT NULL DEFAULT '';
ALTER TABLE rule_limits ADD COLUMN calendar TEXT NOT NULL DEFAULT '';
ALTER TABLE rule_limits ADD COLUMN time_zone TEXT NOT NULL DEFAULT '';
