-- Retention prunes the audit log by age: find old entries without a scan.
CREATE INDEX audit_log_at ON audit_log (at_ms);
