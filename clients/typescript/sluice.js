// Client for Sluice's HTTP API (checks, holds, admin), following its
// OpenAPI document (GET /v1/openapi.json). Zero runtime dependencies: it
// needs only the platform's fetch (Node.js 18+, Deno, Bun, browsers).
// Types are in sluice.d.ts.

/**
 * Every operation of the OpenAPI document this client calls, by the
 * document's operationId: [method, path]. A test compares it with the
 * document, so the two cannot drift apart.
 */
export const OPERATIONS = Object.freeze({
  check: ["POST", "/v1/check"],
  settleHold: ["POST", "/v1/holds/{id}/settle"],
  releaseHold: ["DELETE", "/v1/holds/{id}"],
  extendHold: ["POST", "/v1/holds/{id}/extend"],
  takeLease: ["POST", "/v1/leases"],
  renewLease: ["POST", "/v1/leases/{id}/renew"],
  returnLease: ["DELETE", "/v1/leases/{id}"],
  createTenant: ["POST", "/v1/tenants"],
  listTenants: ["GET", "/v1/tenants"],
  getTenant: ["GET", "/v1/tenants/{tenant}"],
  setTenantStatus: ["PATCH", "/v1/tenants/{tenant}"],
  deleteTenant: ["DELETE", "/v1/tenants/{tenant}"],
  createKey: ["POST", "/v1/tenants/{tenant}/keys"],
  listKeys: ["GET", "/v1/tenants/{tenant}/keys"],
  revokeKey: ["DELETE", "/v1/tenants/{tenant}/keys/{id}"],
  putRule: ["PUT", "/v1/tenants/{tenant}/rules/{name}"],
  listRules: ["GET", "/v1/tenants/{tenant}/rules"],
  getRule: ["GET", "/v1/tenants/{tenant}/rules/{name}"],
  deleteRule: ["DELETE", "/v1/tenants/{tenant}/rules/{name}"],
  peekSubject: ["GET", "/v1/tenants/{tenant}/rules/{name}/subjects/{subject}"],
  resetSubject: ["DELETE", "/v1/tenants/{tenant}/rules/{name}/subjects/{subject}"],
  putOverride: ["PUT", "/v1/tenants/{tenant}/rules/{name}/overrides/{override}"],
  listOverrides: ["GET", "/v1/tenants/{tenant}/rules/{name}/overrides"],
  getOverride: ["GET", "/v1/tenants/{tenant}/rules/{name}/overrides/{override}"],
  deleteOverride: ["DELETE", "/v1/tenants/{tenant}/rules/{name}/overrides/{override}"],
  topUpCredits: ["POST", "/v1/tenants/{tenant}/rules/{name}/subjects/{subject}/credits"],
  listAudit: ["GET", "/v1/audit"],
  getUsage: ["GET", "/v1/tenants/{tenant}/usage"],
  getTopSubjects: ["GET", "/v1/tenants/{tenant}/usage/top"],
  health: ["GET", "/healthz"],
  ready: ["GET", "/readyz"],
});

/** An answer of the service that is not a success: its status, code and sentence. */
export class SluiceError extends Error {
  constructor(status, code, message, retryAfterMs) {
    super(`sluice service answered ${status} ${code}: ${message}`);
    this.name = "SluiceError";
    /** The HTTP status. */
    this.status = status;
    /** The error code of the body (DESIGN.md's table), e.g. "invalid_request". */
    this.code = code;
    /** The service's sentence saying what is wrong. */
    this.detail = message;
    /** On 429 rate_limited: the exact wait before the same call would be allowed. */
    this.retryAfterMs = retryAfterMs;
  }
}

const defaultTimeoutMs = 5000;

export class Client {
  /**
   * @param {string} baseUrl where sluice serve listens, e.g. "http://127.0.0.1:8080"
   * @param {object} [options]
   * @param {string} [options.apiKey] a tenant API key, or the operator's admin token
   * @param {number} [options.timeoutMs] per call (default 5000)
   * @param {typeof fetch} [options.fetch] the fetch to use (default the global one)
   */
  constructor(baseUrl, options = {}) {
    if (typeof baseUrl !== "string" || !/^https?:\/\//.test(baseUrl)) {
      throw new TypeError(`sluice: the base URL must start with http:// or https://, got ${JSON.stringify(baseUrl)}`);
    }
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.apiKey = options.apiKey ?? "";
    this.timeoutMs = options.timeoutMs ?? defaultTimeoutMs;
    this.fetch = options.fetch ?? globalThis.fetch;
    if (typeof this.fetch !== "function") {
      throw new TypeError("sluice: no fetch: use Node.js 18 or newer, or pass options.fetch");
    }
  }

  // Checks and holds.

  /** Checks (and, if allowed, takes) cost units; a denial is a Decision with allowed false, not an error. */
  check({ route, subject = "", cost } = {}) {
    return this.#decide({ route, subject, cost });
  }

  /** A check that holds its cost as an estimate, to settle, release or extend by decision.hold.id. */
  reserve({ route, subject = "", cost } = {}) {
    return this.#decide({ route, subject, cost, reserve: true });
  }

  settleHold(id, cost) {
    return this.#call("settleHold", { id }, { body: { cost } });
  }

  releaseHold(id) {
    return this.#call("releaseHold", { id });
  }

  extendHold(id) {
    return this.#call("extendHold", { id });
  }

  // Quota leases (a rule whose every limit says "lease": "auto"): admit up
  // to lease.granted requests in this process, for lease.usable_for_ms from
  // when the call was sent, then renew or return with the unused ones.

  /** Decides one request and leases up to want units; a denial is an answer with allowed false and lease null. */
  takeLease({ route, subject = "", holder, want, ttlMs } = {}) {
    return this.#call("takeLease", {}, { body: { route, subject, holder, want, ttl_ms: ttlMs }, accept: [200, 429] });
  }

  /** Gives back the unused units and leases again (same rule and subject); one store call, since the id names the lease's rule and subject (naming route and subject too makes an older server's id one call as well, not two). */
  renewLease(id, { unused, holder, want, ttlMs, route, subject } = {}) {
    const body = { unused, holder, want, ttl_ms: ttlMs };
    if (route !== undefined) Object.assign(body, { route, subject: subject ?? "" });
    return this.#call("renewLease", { id }, { body, accept: [200, 429] });
  }

  /** Ends the lease, giving back its unused units (idempotent). */
  returnLease(id, unused) {
    return this.#call("returnLease", { id }, { query: { unused } });
  }

  // Admin: tenants, keys, rules, subjects, audit.

  createTenant(name) {
    return this.#call("createTenant", {}, { body: { name } });
  }

  async listTenants() {
    return (await this.#call("listTenants")).tenants;
  }

  getTenant(tenant) {
    return this.#call("getTenant", { tenant });
  }

  setTenantStatus(tenant, status) {
    return this.#call("setTenantStatus", { tenant }, { body: { status } });
  }

  deleteTenant(tenant) {
    return this.#call("deleteTenant", { tenant });
  }

  /** Creates an API key; the answer's secret is shown this once. */
  createKey(tenant, { role, name } = {}) {
    return this.#call("createKey", { tenant }, { body: name === undefined ? { role } : { name, role } });
  }

  async listKeys(tenant) {
    return (await this.#call("listKeys", { tenant })).keys;
  }

  revokeKey(tenant, id) {
    return this.#call("revokeKey", { tenant, id });
  }

  /** Creates or replaces a rule: { route, limits, failure_mode?, shadow? }. */
  putRule(tenant, name, rule) {
    return this.#call("putRule", { tenant, name }, { body: rule });
  }

  async listRules(tenant) {
    return (await this.#call("listRules", { tenant })).rules;
  }

  getRule(tenant, name) {
    return this.#call("getRule", { tenant, name });
  }

  deleteRule(tenant, name) {
    return this.#call("deleteRule", { tenant, name });
  }

  /** A subject's figures under each limit of a rule, consuming nothing. */
  peekSubject(tenant, name, subject) {
    return this.#call("peekSubject", { tenant, name, subject });
  }

  resetSubject(tenant, name, subject) {
    return this.#call("resetSubject", { tenant, name, subject });
  }

  /** Creates or replaces an override: { subjects, limits, expires_at? }. */
  putOverride(tenant, name, override, body) {
    return this.#call("putOverride", { tenant, name, override }, { body });
  }

  async listOverrides(tenant, name) {
    return (await this.#call("listOverrides", { tenant, name })).overrides;
  }

  getOverride(tenant, name, override) {
    return this.#call("getOverride", { tenant, name, override });
  }

  deleteOverride(tenant, name, override) {
    return this.#call("deleteOverride", { tenant, name, override });
  }

  /** A tenant's usage history: { rule?, step?, from?, to? }. */
  getUsage(tenant, query = {}) {
    return this.#call("getUsage", { tenant }, { query });
  }

  /** A tenant's heaviest subjects: { rule?, by?, from?, to?, limit? }. */
  getTopSubjects(tenant, query = {}) {
    return this.#call("getTopSubjects", { tenant }, { query });
  }

  /**
   * Adds to ({limit, add, idempotency_key}) or sets ({limit, set, idempotency_key})
   * a subject's credits balance, once per idempotency key: {balance, applied}.
   */
  topUpCredits(tenant, name, subject, topUp) {
    return this.#call("topUpCredits", { tenant, name, subject }, { body: topUp });
  }

  /** One page of the audit log; pass page.next_before as before for the next. */
  listAudit(query = {}) {
    return this.#call("listAudit", {}, { query });
  }

  // Health.

  health() {
    return this.#call("health");
  }

  ready() {
    return this.#call("ready");
  }

  async #decide(body) {
    if (body.cost === undefined) delete body.cost;
    return this.#call("check", {}, { body, accept: [200, 429] });
  }

  async #call(operation, params = {}, { body, query, accept = [200, 201, 204] } = {}) {
    const [method, template] = OPERATIONS[operation];
    const path = template.replace(/\{(\w+)\}/g, (_, name) => {
      const value = params[name];
      if (typeof value !== "string" || value === "") {
        throw new TypeError(`sluice: ${operation} needs ${name}, a non-empty string`);
      }
      return encodeURIComponent(value);
    });
    let url = this.baseUrl + path;
    if (query) {
      const search = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) {
        if (v !== undefined && v !== null) search.set(k, String(v));
      }
      if (search.size > 0) url += "?" + search;
    }
    const headers = { Accept: "application/json" };
    if (this.apiKey) headers.Authorization = "Bearer " + this.apiKey;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const resp = await this.fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    const text = await resp.text();
    if (accept.includes(resp.status)) {
      return text === "" ? null : JSON.parse(text);
    }
    let code = `http_${resp.status}`;
    let message = resp.statusText || "unexpected answer";
    let retryAfterMs;
    try {
      const e = JSON.parse(text).error;
      if (e && typeof e.code === "string") {
        code = e.code;
        message = e.message;
        retryAfterMs = e.retry_after_ms;
      }
    } catch {
      // Not Sluice's error body (a proxy's page): the status says it.
    }
    throw new SluiceError(resp.status, code, message, retryAfterMs);
  }
}
