"""Client for Sluice's HTTP API: checks, holds, quota leases and the admin calls.

Standard library only (urllib, json), typed. It follows the OpenAPI
document the service serves at GET /v1/openapi.json; OPERATIONS lists every
call by the document's operationId, and a test compares the two.

    from sluice_client import Client
    app = Client("http://127.0.0.1:8080", api_key=secret)
    d = app.check("/api/orders/17", subject="alice")
    if not d["allowed"]:
        wait_ms = d["retry_after_ms"]
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Mapping, Optional, Tuple

__all__ = ["Client", "SluiceError", "OPERATIONS"]

JSON = Dict[str, Any]

#: Every operation of the OpenAPI document the client calls, by operationId:
#: (method, path). A test compares it with the document served.
OPERATIONS: Mapping[str, Tuple[str, str]] = {
    "check": ("POST", "/v1/check"),
    "settleHold": ("POST", "/v1/holds/{id}/settle"),
    "releaseHold": ("DELETE", "/v1/holds/{id}"),
    "extendHold": ("POST", "/v1/holds/{id}/extend"),
    "takeLease": ("POST", "/v1/leases"),
    "renewLease": ("POST", "/v1/leases/{id}/renew"),
    "returnLease": ("DELETE", "/v1/leases/{id}"),
    "createTenant": ("POST", "/v1/tenants"),
    "listTenants": ("GET", "/v1/tenants"),
    "getTenant": ("GET", "/v1/tenants/{tenant}"),
    "setTenantStatus": ("PATCH", "/v1/tenants/{tenant}"),
    "deleteTenant": ("DELETE", "/v1/tenants/{tenant}"),
    "createKey": ("POST", "/v1/tenants/{tenant}/keys"),
    "listKeys": ("GET", "/v1/tenants/{tenant}/keys"),
    "revokeKey": ("DELETE", "/v1/tenants/{tenant}/keys/{id}"),
    "putRule": ("PUT", "/v1/tenants/{tenant}/rules/{name}"),
    "listRules": ("GET", "/v1/tenants/{tenant}/rules"),
    "getRule": ("GET", "/v1/tenants/{tenant}/rules/{name}"),
    "deleteRule": ("DELETE", "/v1/tenants/{tenant}/rules/{name}"),
    "peekSubject": ("GET", "/v1/tenants/{tenant}/rules/{name}/subjects/{subject}"),
    "resetSubject": ("DELETE", "/v1/tenants/{tenant}/rules/{name}/subjects/{subject}"),
    "putOverride": ("PUT", "/v1/tenants/{tenant}/rules/{name}/overrides/{override}"),
    "listOverrides": ("GET", "/v1/tenants/{tenant}/rules/{name}/overrides"),
    "getOverride": ("GET", "/v1/tenants/{tenant}/rules/{name}/overrides/{override}"),
    "deleteOverride": ("DELETE", "/v1/tenants/{tenant}/rules/{name}/overrides/{override}"),
    "topUpCredits": ("POST", "/v1/tenants/{tenant}/rules/{name}/subjects/{subject}/credits"),
    "listAudit": ("GET", "/v1/audit"),
    "getUsage": ("GET", "/v1/tenants/{tenant}/usage"),
    "getTopSubjects": ("GET", "/v1/tenants/{tenant}/usage/top"),
    "health": ("GET", "/healthz"),
    "ready": ("GET", "/readyz"),
}

#: The Python method of each operation (snake case of the operationId).
METHODS: Mapping[str, str] = {
    "check": "check",
    "settleHold": "settle_hold",
    "releaseHold": "release_hold",
    "extendHold": "extend_hold",
    "takeLease": "take_lease",
    "renewLease": "renew_lease",
    "returnLease": "return_lease",
    "createTenant": "create_tenant",
    "listTenants": "list_tenants",
    "getTenant": "get_tenant",
    "setTenantStatus": "set_tenant_status",
    "deleteTenant": "delete_tenant",
    "createKey": "create_key",
    "listKeys": "list_keys",
    "revokeKey": "revoke_key",
    "putRule": "put_rule",
    "listRules": "list_rules",
    "getRule": "get_rule",
    "deleteRule": "delete_rule",
    "peekSubject": "peek_subject",
    "resetSubject": "reset_subject",
    "putOverride": "put_override",
    "listOverrides": "list_overrides",
    "getOverride": "get_override",
    "deleteOverride": "delete_override",
    "topUpCredits": "top_up_credits",
    "listAudit": "list_audit",
    "getUsage": "get_usage",
    "getTopSubjects": "get_top_subjects",
    "health": "health",
    "ready": "ready",
}


class SluiceError(Exception):
    """An answer of the service that is not a success."""

    def __init__(self, status: int, code: str, message: str, retry_after_ms: Optional[int] = None):
        super().__init__(f"sluice service answered {status} {code}: {message}")
        #: The HTTP status.
        self.status = status
        #: The body's error code (DESIGN.md's table), e.g. "invalid_request".
        self.code = code
        #: The service's sentence saying what is wrong.
        self.detail = message
        #: On 429 rate_limited: the exact wait before the same call would be allowed.
        self.retry_after_ms = retry_after_ms


class Client:
    """A client of one sluice serve, with one credential.

    api_key is a tenant API key (check role for checks, admin role for its
    tenant's admin calls) or the operator's admin token.
    """

    def __init__(self, base_url: str, api_key: str = "", timeout: float = 5.0):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"sluice: the base URL must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    # Checks and holds.

    def check(self, route: str, subject: str = "", cost: Optional[int] = None) -> JSON:
        """Checks (and, if allowed, takes) cost units. A denial is a decision
        with allowed False (and retry_after_ms), not an exception."""
        return self._decide({"route": route, "subject": subject}, cost)

    def reserve(self, route: str, subject: str = "", cost: Optional[int] = None) -> JSON:
        """A check that holds its cost as an estimate: settle, release or
        extend it by decision["hold"]["id"]."""
        return self._decide({"route": route, "subject": subject, "reserve": True}, cost)

    def settle_hold(self, hold_id: str, cost: int) -> JSON:
        return self._call("settleHold", {"id": hold_id}, body={"cost": cost})

    def release_hold(self, hold_id: str) -> JSON:
        return self._call("releaseHold", {"id": hold_id})

    def extend_hold(self, hold_id: str) -> JSON:
        return self._call("extendHold", {"id": hold_id})

    # Quota leases (a rule whose every limit says "lease": "auto"): admit up
    # to lease["granted"] requests in this process, for lease["usable_for_ms"]
    # from when the call was sent, then renew or return with the unused ones.

    def take_lease(self, route: str, holder: str, want: int, subject: str = "", ttl_ms: Optional[int] = None) -> JSON:
        """Decides one request and leases up to want units. A denial is an
        answer with allowed False and lease None, not an exception."""
        body: JSON = {"route": route, "subject": subject, "holder": holder, "want": want}
        if ttl_ms is not None:
            body["ttl_ms"] = ttl_ms
        return self._call("takeLease", body=body, accept=(200, 429))

    def renew_lease(self, lease_id: str, unused: int, holder: str, want: int, ttl_ms: Optional[int] = None,
                    route: Optional[str] = None, subject: str = "") -> JSON:
        """Gives back the unused units and leases again (same rule and subject).

        One store call: the id names the lease's rule and subject. Naming
        the route and subject too makes it one for an older server's id
        (without its "~" part) as well, not two."""
        body: JSON = {"unused": unused, "holder": holder, "want": want}
        if ttl_ms is not None:
            body["ttl_ms"] = ttl_ms
        if route is not None:
            body["route"] = route
            body["subject"] = subject
        return self._call("renewLease", {"id": lease_id}, body=body, accept=(200, 429))

    def return_lease(self, lease_id: str, unused: int) -> JSON:
        """Ends the lease, giving back its unused units (idempotent)."""
        return self._call("returnLease", {"id": lease_id}, query={"unused": unused})

    # Admin: tenants, keys, rules, subjects, audit.

    def create_tenant(self, name: str) -> JSON:
        return self._call("createTenant", body={"name": name})

    def list_tenants(self) -> List[JSON]:
        return self._call("listTenants")["tenants"]

    def get_tenant(self, tenant: str) -> JSON:
        return self._call("getTenant", {"tenant": tenant})

    def set_tenant_status(self, tenant: str, status: str) -> JSON:
        return self._call("setTenantStatus", {"tenant": tenant}, body={"status": status})

    def delete_tenant(self, tenant: str) -> None:
        self._call("deleteTenant", {"tenant": tenant})

    def create_key(self, tenant: str, role: str, name: Optional[str] = None) -> JSON:
        """Creates an API key; the answer's "secret" is shown this once."""
        body: JSON = {"role": role}
        if name is not None:
            body["name"] = name
        return self._call("createKey", {"tenant": tenant}, body=body)

    def list_keys(self, tenant: str) -> List[JSON]:
        return self._call("listKeys", {"tenant": tenant})["keys"]

    def revoke_key(self, tenant: str, key_id: str) -> None:
        self._call("revokeKey", {"tenant": tenant, "id": key_id})

    def put_rule(self, tenant: str, name: str, rule: JSON) -> JSON:
        """Creates or replaces a rule: {"route", "limits", "failure_mode"?, "shadow"?}."""
        return self._call("putRule", {"tenant": tenant, "name": name}, body=rule)

    def list_rules(self, tenant: str) -> List[JSON]:
        return self._call("listRules", {"tenant": tenant})["rules"]

    def get_rule(self, tenant: str, name: str) -> JSON:
        return self._call("getRule", {"tenant": tenant, "name": name})

    def delete_rule(self, tenant: str, name: str) -> None:
        self._call("deleteRule", {"tenant": tenant, "name": name})

    def peek_subject(self, tenant: str, rule: str, subject: str) -> JSON:
        """A subject's figures under each limit of a rule, consuming nothing."""
        return self._call("peekSubject", {"tenant": tenant, "name": rule, "subject": subject})

    def reset_subject(self, tenant: str, rule: str, subject: str) -> None:
        self._call("resetSubject", {"tenant": tenant, "name": rule, "subject": subject})

    def put_override(self, tenant: str, rule: str, name: str, override: JSON) -> JSON:
        """Creates or replaces an override: {"subjects", "limits", "expires_at"?}."""
        return self._call("putOverride", {"tenant": tenant, "name": rule, "override": name}, body=override)

    def list_overrides(self, tenant: str, rule: str) -> List[JSON]:
        return self._call("listOverrides", {"tenant": tenant, "name": rule})["overrides"]

    def get_override(self, tenant: str, rule: str, name: str) -> JSON:
        return self._call("getOverride", {"tenant": tenant, "name": rule, "override": name})

    def delete_override(self, tenant: str, rule: str, name: str) -> None:
        self._call("deleteOverride", {"tenant": tenant, "name": rule, "override": name})

    def get_usage(self, tenant: str, **query: Any) -> JSON:
        """A tenant's usage history (rule, step, from, to): the fleet's sums
        per rule and period, and the gaps where counts were dropped."""
        return self._call("getUsage", {"tenant": tenant}, query=query)

    def get_top_subjects(self, tenant: str, **query: Any) -> JSON:
        """A tenant's heaviest subjects (rule, by, from, to, limit)."""
        return self._call("getTopSubjects", {"tenant": tenant}, query=query)

    def top_up_credits(self, tenant: str, rule: str, subject: str, top_up: JSON) -> JSON:
        """Adds to ({"limit", "add", "idempotency_key"}) or sets ({"limit",
        "set", "idempotency_key"}) a subject's credits balance, once per
        idempotency key: {"balance", "applied"}."""
        return self._call("topUpCredits", {"tenant": tenant, "name": rule, "subject": subject}, body=top_up)

    def list_audit(self, **query: Any) -> JSON:
        """One page of the audit log (tenant, actor, action, since, until,
        before, limit); pass page["next_before"] as before for the next."""
        return self._call("listAudit", query=query)

    # Health.

    def health(self) -> JSON:
        return self._call("health")

    def ready(self) -> JSON:
        return self._call("ready")

    def _decide(self, body: JSON, cost: Optional[int]) -> JSON:
        if cost is not None:
            body["cost"] = cost
        return self._call("check", body=body, accept=(200, 429))

    def _call(
        self,
        operation: str,
        params: Optional[Mapping[str, str]] = None,
        body: Optional[JSON] = None,
        query: Optional[Mapping[str, Any]] = None,
        accept: Tuple[int, ...] = (200, 201, 204),
    ) -> Any:
        method, path = OPERATIONS[operation]
        for name, value in (params or {}).items():
            if not isinstance(value, str) or value == "":
                raise ValueError(f"sluice: {operation} needs {name}, a non-empty string")
            path = path.replace("{" + name + "}", urllib.parse.quote(value, safe=""))
        url = self.base_url + path
        if query:
            pairs = {k: str(v) for k, v in query.items() if v is not None}
            if pairs:
                url += "?" + urllib.parse.urlencode(pairs)
        headers = {"Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                status, text = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read()
        if status in accept:
            return json.loads(text) if text else None
        code, message, retry_after_ms = f"http_{status}", "unexpected answer", None
        try:
            err = json.loads(text)["error"]
            code, message, retry_after_ms = err["code"], err["message"], err.get("retry_after_ms")
        except (ValueError, KeyError, TypeError):
            pass  # not Sluice's error body (a proxy's page): the status says it
        raise SluiceError(status, code, message, retry_after_ms)
