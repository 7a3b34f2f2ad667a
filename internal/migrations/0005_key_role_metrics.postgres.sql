-- A key may have the metrics role: it reads /metrics, its tenant's series only.
ALTER TABLE api_keys DROP CONSTRAINT api_keys_role_check;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_role_check CHECK (role IN ('check', 'admin', 'metrics'));
