// Runs against a real `sluice serve`: SLUICE_URL is where it listens and
// SLUICE_ADMIN_TOKEN its operator token (internal/e2e's TestClients starts
// one and runs this). Each run uses a tenant of its own.
import { test } from "node:test";
import assert from "node:assert/strict";

import { Client, OPERATIONS, SluiceError } from "../sluice.js";

const url = process.env.SLUICE_URL;
const token = process.env.SLUICE_ADMIN_TOKEN;
if (!url || !token) {
  throw new Error("set SLUICE_URL and SLUICE_ADMIN_TOKEN to a running sluice serve and its admin token");
}
const operator = new Client(url, { apiKey: token });
const tenant = "ts-" + Math.random().toString(36).slice(2, 10);

// Operations of the document a client has no business calling.
const notClientCalls = new Set(["openapi", "metrics"]);

test("OPERATIONS is the OpenAPI document's operations, and each is a method", async () => {
  const doc = await (await fetch(url + "/v1/openapi.json")).json();
  const documented = {};
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (op && op.operationId && !notClientCalls.has(op.operationId)) {
        documented[op.operationId] = [method.toUpperCase(), path];
      }
    }
  }
  assert.deepEqual({ ...OPERATIONS }, documented);
  for (const id of Object.keys(OPERATIONS)) {
    assert.equal(typeof Client.prototype[id], "function", `Client has no method ${id}`);
  }
});

test("a tenant's walk-through: rule, key, checks, holds, peek, reset, audit", async () => {
  const created = await operator.createTenant(tenant);
  assert.equal(created.name, tenant);
  assert.equal(created.status, "active");
  assert.ok((await operator.listTenants()).some((t) => t.name === tenant));

  const rule = await operator.putRule(tenant, "orders", {
    route: "/api/orders*",
    limits: [{ name: "minute", algorithm: "fixed_window", limit: 3, window: "1m" }],
  });
  assert.equal(rule.limits[0].name, "minute");
  assert.equal((await operator.getRule(tenant, "orders")).route, "/api/orders*");
  await operator.putRule(tenant, "jobs", {
    route: "/jobs*",
    limits: [{ algorithm: "token_bucket", capacity: 10, refill_per_second: 1 }],
  });
  assert.deepEqual((await operator.listRules(tenant)).map((r) => r.name).sort(), ["jobs", "orders"]);

  const key = await operator.createKey(tenant, { role: "check", name: "app" });
  assert.ok(key.secret.length > 20);
  assert.ok((await operator.listKeys(tenant)).some((k) => k.id === key.id && k.secret === undefined));
  const app = new Client(url, { apiKey: key.secret });

  for (let i = 1; i <= 3; i++) {
    const d = await app.check({ route: "/api/orders/17", subject: "alice" });
    assert.equal(d.allowed, true, `check ${i}`);
    assert.equal(d.remaining, 3 - i);
    assert.equal(d.rule, "orders");
  }
  const denied = await app.check({ route: "/api/orders/17", subject: "alice" });
  assert.equal(denied.allowed, false);
  assert.ok(denied.retry_after_ms > 0);
  assert.equal((await app.check({ route: "/api/orders/17", subject: "bob" })).allowed, true);
  assert.equal((await app.check({ route: "/elsewhere" })).rule, null);

  const peek = await operator.peekSubject(tenant, "orders", "alice");
  assert.equal(peek.remaining, 0);
  assert.equal(await operator.resetSubject(tenant, "orders", "alice"), null);
  assert.equal((await operator.peekSubject(tenant, "orders", "alice")).remaining, 3);

  await operator.putRule(tenant, "paid", { route: "/paid*", limits: [{ name: "credits", algorithm: "credits" }] });
  const topUp = { limit: "credits", add: 5, idempotency_key: "inv-1" };
  assert.deepEqual(await operator.topUpCredits(tenant, "paid", "alice", topUp), { balance: 5, applied: true });
  assert.deepEqual(await operator.topUpCredits(tenant, "paid", "alice", topUp), { balance: 5, applied: false });

  const reserved = await app.reserve({ route: "/jobs/run", subject: "batch", cost: 4 });
  assert.equal(reserved.allowed, true);
  assert.equal(reserved.remaining, 6);
  const hold = reserved.hold.id;
  assert.equal((await app.extendHold(hold)).status, "extended");
  assert.equal((await app.settleHold(hold, 1)).status, "settled");
  assert.equal((await app.releaseHold(hold)).status, "finished");
  assert.equal((await operator.peekSubject(tenant, "jobs", "batch")).remaining, 9);

  await operator.putRule(tenant, "hot", { route: "/hot", limits: [
    { name: "hour", algorithm: "fixed_window", limit: 10, window: "1h", lease: "auto" }] });
  const taken = await app.takeLease({ route: "/hot", subject: "s", holder: "ts", want: 6 });
  assert.equal(taken.allowed, true);
  assert.equal(taken.lease.granted, 6);
  const renewed = await app.renewLease(taken.lease.id, { unused: 2, holder: "ts", want: 4, route: "/hot", subject: "s" });
  assert.equal(renewed.returned, "returned");
  assert.equal(renewed.lease.granted, 4);
  assert.equal((await app.returnLease(renewed.lease.id, 4)).status, "returned");
  assert.equal((await operator.peekSubject(tenant, "hot", "s")).remaining, 6);
  await assert.rejects(app.takeLease({ route: "/api/orders/1", holder: "ts", want: 1 }), (e) => e.status === 409 && e.code === "rule_not_leased");

  const page = await operator.listAudit({ tenant, limit: 50 });
  const actions = page.entries.map((e) => e.action);
  for (const want of ["tenant.create", "rule.create", "key.create", "subject.reset"]) {
    assert.ok(actions.includes(want), `audit lacks ${want}: ${actions}`);
  }

  assert.equal((await operator.setTenantStatus(tenant, "suspended")).status, "suspended");
  await assert.rejects(app.check({ route: "/api/orders/1" }), (e) => e instanceof SluiceError && e.code === "tenant_suspended");
  await operator.setTenantStatus(tenant, "active");

  assert.equal(await operator.revokeKey(tenant, key.id), null);
  await assert.rejects(app.check({ route: "/api/orders/1" }), (e) => e.status === 401 && e.code === "invalid_api_key");
  assert.equal(await operator.deleteRule(tenant, "jobs"), null);
  assert.equal(await operator.deleteTenant(tenant), null);
  await assert.rejects(operator.getTenant(tenant), (e) => e.status === 404 && e.code === "not_found");
});

test("bad input is a SluiceError with the service's code and sentence", async () => {
  await assert.rejects(operator.createTenant("Not A Slug"), (e) => {
    assert.ok(e instanceof SluiceError);
    assert.equal(e.status, 400);
    assert.equal(e.code, "invalid_request");
    assert.ok(e.detail.length > 10, e.detail);
    return true;
  });
  await assert.rejects(new Client(url, { apiKey: "sk_wrong" }).check({ route: "/x" }), (e) => e.status === 401);
  assert.throws(() => new Client("localhost:8080"), /http:\/\/ or https:\/\//);
  await assert.rejects(operator.getTenant(""), /needs tenant/);
});

test("health and readiness", async () => {
  assert.deepEqual(await operator.health(), { status: "ok" });
  assert.equal((await operator.ready()).status, "ready");
});
