// Types of sluice.js, after the OpenAPI document's schemas.

export type Algorithm = "token_bucket" | "fixed_window" | "sliding_window" | "concurrency" | "credits";
export type FailureMode = "closed" | "open" | "local" | "";
export type Role = "check" | "admin" | "metrics";
export type TenantStatus = "active" | "suspended";

export interface LimitDecision {
  name: string;
  algorithm: Algorithm;
  limit: number;
  remaining: number;
  reset_after_ms: number;
  retry_after_ms: number;
}

export interface Hold {
  id: string;
  expires_in_ms: number;
}

/** A check's answer; top-level figures are the most restrictive limit's. */
export interface Decision {
  allowed: boolean;
  rule: string | null;
  limit: number;
  remaining: number;
  reset_after_ms: number;
  retry_after_ms: number;
  degraded: boolean;
  shadow: boolean;
  limits: LimitDecision[];
  hold?: Hold;
}

export interface HoldAnswer {
  id: string;
  status: "settled" | "released" | "extended" | "expired" | "finished" | "unknown";
  expires_in_ms: number;
}

export type Limit =
  | { name?: string; algorithm: "token_bucket"; capacity: number; refill_per_second: number }
  | { name?: string; algorithm: "fixed_window" | "sliding_window"; limit: number; window: string }
  | { name?: string; algorithm: "concurrency"; limit: number; ttl?: string };

export interface PutRuleRequest {
  route: string;
  limits: Limit[];
  failure_mode?: FailureMode;
  shadow?: boolean;
}

export interface Rule {
  tenant: string;
  name: string;
  route: string;
  limits: (Limit & { name: string })[];
  failure_mode: FailureMode;
  shadow: boolean;
  updated_at: string;
}

export interface Tenant {
  name: string;
  status: TenantStatus;
  created_at: string;
}

export interface Key {
  id: string;
  tenant: string;
  name: string;
  role: Role;
  created_at: string;
  revoked_at: string | null;
}

export interface KeyCreated extends Key {
  secret: string;
}

export interface AuditEntry {
  id: number;
  time: string;
  /** "operator", "system", or the ID of the tenant admin key that made the change. */
  actor: string;
  tenant: string | null;
  action: string;
  target: string;
  before: Record<string, unknown> | null;
  after: Record<string, unknown> | null;
}

export interface AuditPage {
  entries: AuditEntry[];
  next_before: number | null;
}

export interface AuditQuery {
  tenant?: string;
  actor?: string;
  action?: string;
  since?: string;
  until?: string;
  before?: number;
  limit?: number;
}

export interface Ready {
  status: "ready";
  store: "ok" | "unavailable";
  catalog: "current" | "stale";
  snapshot_version: number;
  snapshot_age_seconds: number;
  [field: string]: unknown;
}

export interface CheckRequest {
  route: string;
  subject?: string;
  /** Units to take (default 1); 0 peeks. */
  cost?: number;
}

export interface ClientOptions {
  /** A tenant API key, or the operator's admin token. */
  apiKey?: string;
  /** Per call; default 5000. */
  timeoutMs?: number;
  fetch?: typeof fetch;
}

/** A lease call's answer: the decision of a check of cost 1, and the lease (null when nothing was granted). */
export interface LeaseAnswer extends Omit<Decision, "hold"> {
  lease: { id: string; granted: number; expires_in_ms: number; usable_for_ms: number } | null;
  returned?: "returned" | "expired" | "finished";
}

export declare const OPERATIONS: Readonly<Record<string, readonly [string, string]>>;

export declare class SluiceError extends Error {
  readonly status: number;
  readonly code: string;
  readonly detail: string;
  readonly retryAfterMs?: number;
}

export declare class Client {
  constructor(baseUrl: string, options?: ClientOptions);
  check(request: CheckRequest): Promise<Decision>;
  reserve(request: CheckRequest): Promise<Decision>;
  settleHold(id: string, cost: number): Promise<HoldAnswer>;
  releaseHold(id: string): Promise<HoldAnswer>;
  extendHold(id: string): Promise<HoldAnswer>;
  takeLease(request: { route: string; subject?: string; holder: string; want: number; ttlMs?: number }): Promise<LeaseAnswer>;
  renewLease(id: string, request: { unused: number; holder: string; want: number; ttlMs?: number; route?: string; subject?: string }): Promise<LeaseAnswer>;
  returnLease(id: string, unused: number): Promise<{ id: string; status: "returned" | "expired" | "finished" | "unknown" }>;

  createTenant(name: string): Promise<Tenant>;
  listTenants(): Promise<Tenant[]>;
  getTenant(tenant: string): Promise<Tenant>;
  setTenantStatus(tenant: string, status: TenantStatus): Promise<Tenant>;
  deleteTenant(tenant: string): Promise<null>;
  createKey(tenant: string, key: { role: Role; name?: string }): Promise<KeyCreated>;
  listKeys(tenant: string): Promise<Key[]>;
  revokeKey(tenant: string, id: string): Promise<null>;
  putRule(tenant: string, name: string, rule: PutRuleRequest): Promise<Rule>;
  listRules(tenant: string): Promise<Rule[]>;
  getRule(tenant: string, name: string): Promise<Rule>;
  deleteRule(tenant: string, name: string): Promise<null>;
  peekSubject(tenant: string, rule: string, subject: string): Promise<Decision>;
  resetSubject(tenant: string, rule: string, subject: string): Promise<null>;
  putOverride(tenant: string, rule: string, name: string, override: { subjects: string | string[]; limits: unknown[]; expires_at?: string | null }): Promise<Record<string, unknown>>;
  listOverrides(tenant: string, rule: string): Promise<Record<string, unknown>[]>;
  getOverride(tenant: string, rule: string, name: string): Promise<Record<string, unknown>>;
  deleteOverride(tenant: string, rule: string, name: string): Promise<null>;
  topUpCredits(tenant: string, rule: string, subject: string, topUp: TopUpRequest): Promise<TopUpAnswer>;
  listAudit(query?: AuditQuery): Promise<AuditPage>;
  getUsage(tenant: string, query?: { rule?: string; step?: "minute" | "hour" | "day"; from?: string; to?: string }): Promise<Record<string, unknown>>;
  getTopSubjects(tenant: string, query?: { rule?: string; by?: "denied" | "units"; from?: string; to?: string; limit?: number }): Promise<Record<string, unknown>>;

  health(): Promise<{ status: "ok" }>;
  ready(): Promise<Ready>;
}

/** A credits top-up: exactly one of add and set, applied once per idempotency_key (24 h). */
export interface TopUpRequest {
  limit: string;
  add?: number;
  set?: number;
  idempotency_key: string;
}

/** The balance after a top-up; applied is false for a repeated idempotency key. */
export interface TopUpAnswer {
  balance: number;
  applied: boolean;
}
