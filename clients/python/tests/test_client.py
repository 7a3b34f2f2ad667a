"""Runs against a real `sluice serve`: SLUICE_URL is where it listens and
SLUICE_ADMIN_TOKEN its operator token (internal/e2e's TestClients starts
one and runs this). Each run uses a tenant of its own."""

import json
import os
import secrets
import unittest
import urllib.request

from sluice_client import METHODS, OPERATIONS, Client, SluiceError

URL = os.environ.get("SLUICE_URL", "")
TOKEN = os.environ.get("SLUICE_ADMIN_TOKEN", "")
if not URL or not TOKEN:
    raise RuntimeError("set SLUICE_URL and SLUICE_ADMIN_TOKEN to a running sluice serve and its admin token")

# Operations of the document a client has no business calling.
NOT_CLIENT_CALLS = {"openapi", "metrics"}


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.operator = Client(URL, api_key=TOKEN)

    def test_operations_are_the_documents(self):
        with urllib.request.urlopen(URL + "/v1/openapi.json", timeout=5) as resp:
            doc = json.load(resp)
        documented = {}
        for path, item in doc["paths"].items():
            for method, op in item.items():
                if isinstance(op, dict) and op.get("operationId") and op["operationId"] not in NOT_CLIENT_CALLS:
                    documented[op["operationId"]] = (method.upper(), path)
        self.assertEqual(dict(OPERATIONS), documented)
        self.assertEqual(set(METHODS), set(OPERATIONS))
        for name in METHODS.values():
            self.assertTrue(callable(getattr(Client, name, None)), f"Client has no method {name}")

    def test_walk_through(self):
        op = self.operator
        tenant = "py-" + secrets.token_hex(4)
        created = op.create_tenant(tenant)
        self.assertEqual((created["name"], created["status"]), (tenant, "active"))
        self.assertIn(tenant, [t["name"] for t in op.list_tenants()])

        rule = op.put_rule(tenant, "orders", {
            "route": "/api/orders*",
            "limits": [{"name": "minute", "algorithm": "fixed_window", "limit": 3, "window": "1m"}],
        })
        self.assertEqual(rule["limits"][0]["name"], "minute")
        self.assertEqual(op.get_rule(tenant, "orders")["route"], "/api/orders*")
        op.put_rule(tenant, "jobs", {"route": "/jobs*", "limits": [{"algorithm": "token_bucket", "capacity": 10, "refill_per_second": 1}]})
        self.assertEqual(sorted(r["name"] for r in op.list_rules(tenant)), ["jobs", "orders"])

        key = op.create_key(tenant, "check", name="app")
        self.assertGreater(len(key["secret"]), 20)
        listed = [k for k in op.list_keys(tenant) if k["id"] == key["id"]]
        self.assertEqual(len(listed), 1)
        self.assertNotIn("secret", listed[0])
        app = Client(URL, api_key=key["secret"])

        for i in range(1, 4):
            d = app.check("/api/orders/17", subject="alice")
            self.assertTrue(d["allowed"], f"check {i}")
            self.assertEqual(d["remaining"], 3 - i)
            self.assertEqual(d["rule"], "orders")
        denied = app.check("/api/orders/17", subject="alice")
        self.assertFalse(denied["allowed"])
        self.assertGreater(denied["retry_after_ms"], 0)
        self.assertTrue(app.check("/api/orders/17", subject="bob")["allowed"])
        self.assertIsNone(app.check("/elsewhere")["rule"])

        self.assertEqual(op.peek_subject(tenant, "orders", "alice")["remaining"], 0)
        self.assertIsNone(op.reset_subject(tenant, "orders", "alice"))
        self.assertEqual(op.peek_subject(tenant, "orders", "alice")["remaining"], 3)

        op.put_rule(tenant, "paid", {"route": "/paid*", "limits": [{"name": "credits", "algorithm": "credits"}]})
        top_up = {"limit": "credits", "add": 5, "idempotency_key": "inv-1"}
        self.assertEqual(op.top_up_credits(tenant, "paid", "alice", top_up), {"balance": 5, "applied": True})
        self.assertEqual(op.top_up_credits(tenant, "paid", "alice", top_up), {"balance": 5, "applied": False})

        reserved = app.reserve("/jobs/run", subject="batch", cost=4)
        self.assertTrue(reserved["allowed"])
        self.assertEqual(reserved["remaining"], 6)
        hold = reserved["hold"]["id"]
        self.assertEqual(app.extend_hold(hold)["status"], "extended")
        self.assertEqual(app.settle_hold(hold, 1)["status"], "settled")
        self.assertEqual(app.release_hold(hold)["status"], "finished")
        self.assertEqual(op.peek_subject(tenant, "jobs", "batch")["remaining"], 9)

        op.put_rule(tenant, "hot", {"route": "/hot", "limits": [
            {"name": "hour", "algorithm": "fixed_window", "limit": 10, "window": "1h", "lease": "auto"}]})
        taken = app.take_lease("/hot", holder="py", want=6, subject="s")
        self.assertTrue(taken["allowed"])
        self.assertEqual(taken["lease"]["granted"], 6)
        renewed = app.renew_lease(taken["lease"]["id"], unused=2, holder="py", want=4, route="/hot", subject="s")
        self.assertEqual((renewed["returned"], renewed["lease"]["granted"]), ("returned", 4))
        self.assertEqual(app.return_lease(renewed["lease"]["id"], unused=4)["status"], "returned")
        self.assertEqual(op.peek_subject(tenant, "hot", "s")["remaining"], 6)
        with self.assertRaises(SluiceError) as refused:
            app.take_lease("/api/orders/1", holder="py", want=1)
        self.assertEqual((refused.exception.status, refused.exception.code), (409, "rule_not_leased"))

        actions = [e["action"] for e in op.list_audit(tenant=tenant, limit=50)["entries"]]
        for want in ("tenant.create", "rule.create", "key.create", "subject.reset"):
            self.assertIn(want, actions)

        self.assertEqual(op.set_tenant_status(tenant, "suspended")["status"], "suspended")
        with self.assertRaises(SluiceError) as e:
            app.check("/api/orders/1")
        self.assertEqual(e.exception.code, "tenant_suspended")
        op.set_tenant_status(tenant, "active")

        op.revoke_key(tenant, key["id"])
        with self.assertRaises(SluiceError) as e:
            app.check("/api/orders/1")
        self.assertEqual((e.exception.status, e.exception.code), (401, "invalid_api_key"))
        op.delete_rule(tenant, "jobs")
        op.delete_tenant(tenant)
        with self.assertRaises(SluiceError) as e:
            op.get_tenant(tenant)
        self.assertEqual((e.exception.status, e.exception.code), (404, "not_found"))

    def test_bad_input(self):
        with self.assertRaises(SluiceError) as e:
            self.operator.create_tenant("Not A Slug")
        self.assertEqual((e.exception.status, e.exception.code), (400, "invalid_request"))
        self.assertGreater(len(e.exception.detail), 10)
        with self.assertRaises(SluiceError) as e:
            Client(URL, api_key="sk_wrong").check("/x")
        self.assertEqual(e.exception.status, 401)
        with self.assertRaisesRegex(ValueError, "http:// or https://"):
            Client("localhost:8080")
        with self.assertRaisesRegex(ValueError, "needs tenant"):
            self.operator.get_tenant("")

    def test_health(self):
        self.assertEqual(self.operator.health(), {"status": "ok"})
        self.assertEqual(self.operator.ready()["status"], "ready")


if __name__ == "__main__":
    unittest.main()
