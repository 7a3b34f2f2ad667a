-- A limit's lease mode (issue 22): 'auto' serves it from quota leases while
-- a key is hot; '' never leases.
ALTER TABLE rule_limits ADD COLUMN lease TEXT NOT NULL DEFAULT '';
