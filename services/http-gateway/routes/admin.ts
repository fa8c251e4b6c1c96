import { createRoute, type OpenAPIHono } from "@hono/zod-openapi";
import { generateApiKey, newKeyId } from "../../../domain/keys/auth";
import { listKeys, readKey, type KeyRecordRow } from "../../../domain/keys/queries";
import { planNamesOf, resolveLimits } from "../../../domain/usage/limits";
import { adminError, issueKeyBody, issuedKeyRecord, keyIdParam, keyRecord, listKeysQuery, ok, planEntry, type KeyRecord } from "../../../schemas/http";
import type { PlanCatalog } from "../../../schemas/plans";
import { issueErrorCode } from "../../../schemas/safe-string";
import { AppError, isAppError, notFound, validationError } from "../../../shared/errors";
import { waitForProjection } from "../../../shared/projection";
import { requireAdmin, type GatewayEnv } from "../auth-middleware";
import type { GatewayDeps } from "../deps";

/**
 * Operator key management (spec 4.8–4.11) and the public plan catalog (4.7).
 * Commands go to the ApiKey aggregate through the key store (domain/keys/store.ts);
 * reads come from the api_keys read model. Issue and revoke wait (bounded) for the projection to apply their
 * event, so the next request already sees the change.
 */
const KEYS_PATH = "/v1/external-transcription/keys";
const errors = {
  400: { description: "invalid request or unknown plan (`invalid_plan`)", content: { "application/json": { schema: adminError } } },
  401: { description: "missing or wrong admin token (`admin_unauthorized`)", content: { "application/json": { schema: adminError } } },
  500: { description: "`issue_failed` or `store_unavailable`", content: { "application/json": { schema: adminError } } },
};
const security = [{ adminToken: [] }];

function toKeyRecord(row: Omit<KeyRecordRow, "key_hash">, now: Date, plans: PlanCatalog): KeyRecord {
  const status = row.revoked_at ? "revoked" : row.expires_at && row.expires_at.getTime() <= now.getTime() ? "expired" : "active";
  return {
    id: row.id,
    ownerId: row.owner_id,
    keyPrefix: row.key_prefix,
    lastFour: row.last_four,
    plan: row.plan,
    status,
    label: row.label,
    expiresAt: row.expires_at?.toISOString() ?? null,
    revokedAt: row.revoked_at?.toISOString() ?? null,
    lastUsedAt: row.last_used_at?.toISOString() ?? null,
    createdAt: row.created_at.toISOString(),
    limits: resolveLimits(plans, row.plan, row.limit_overrides),
    limitOverrides: row.limit_overrides ?? null,
  };
}

const storeUnavailable = (cause: unknown) =>
  new AppError("unavailable", "store_unavailable", "The key store is unavailable; try again shortly.", { status: 500, cause });

/** The key store's refusal as this API answers it: 500 `store_unavailable`. */
const answerStoreDown = (err: unknown): never => {
  throw isAppError(err) && err.code === "store_unavailable" ? storeUnavailable(err) : err;
};

export function registerAdminRoutes(app: OpenAPIHono<GatewayEnv>, deps: GatewayDeps): void {
  app.use(`${KEYS_PATH}`, requireAdmin(deps));
  app.use(`${KEYS_PATH}/*`, requireAdmin(deps));

  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/external-transcription/plans",
      tags: ["plans"],
      summary: "Plan catalog (public)",
      responses: { 200: { description: "every known plan", content: { "application/json": { schema: ok(planEntry.array()) } } } },
    }),
    (c) => c.json({ ok: true as const, data: planNamesOf(deps.config.plans).map((plan) => ({ plan, limits: resolveLimits(deps.config.plans, plan) })) }, 200),
  );

  // Documented with its body schema but parsed by hand: an empty body (curl -X POST)
  // means "all defaults", which the generated JSON validator would refuse.
  app.openAPIRegistry.registerPath(
  createRoute({
      method: "post",
      path: KEYS_PATH,
      tags: ["keys"],
      summary: "Issue an API key",
      security,
      request: { body: { required: false, content: { "application/json": { schema: issueKeyBody } } } },
      responses: { 201: { description: "issued; `key` is shown only here", content: { "application/json": { schema: ok(issuedKeyRecord) } } }, ...errors },
    }),
  );
  app.post(
    KEYS_PATH,
    async (c) => {
      const body = parseIssueBody(await readOptionalJson(await c.req.text()));
      const known = planNamesOf(deps.config.plans);
      if (!known.includes(body.plan)) throw validationError("invalid_plan", `Unknown plan '${body.plan}'. Known plans: ${known.join(", ")}.`);
      const now = deps.now();
      if (body.expires_at && new Date(body.expires_at).getTime() <= now.getTime()) {
        throw validationError("invalid_request", "expires_at must be in the future.");
      }
      const generated = generateApiKey();
      const keyId = newKeyId();
      const { issued, lastSeq } = await deps.keys
        .issue({
          keyId,
          ownerId: body.owner_id,
          keyHash: generated.keyHash,
          keyPrefix: generated.keyPrefix,
          lastFour: generated.lastFour,
          plan: body.plan,
          label: body.label ?? null,
          expiresAt: body.expires_at ? new Date(body.expires_at).toISOString() : null,
          ...(body.limits && Object.keys(body.limits).length ? { limits: body.limits } : {}),
          now: now.toISOString(),
        })
        .catch((err) => {
          throw new AppError("internal", "issue_failed", "The key could not be issued; nothing was stored. Try again.", { retryable: true, cause: err });
        });
      await waitForProjection(deps.db, "api_keys", lastSeq, deps.config.auth.keyProjectionWaitMs).catch(() => false);
      const record = toKeyRecord(
        {
          id: keyId,
          owner_id: issued.ownerId,
          key_prefix: issued.keyPrefix,
          last_four: issued.lastFour,
          plan: issued.plan,
          label: issued.label,
          expires_at: issued.expiresAt ? new Date(issued.expiresAt) : null,
          revoked_at: null,
          last_used_at: null,
          created_at: now,
          limit_overrides: issued.limits ?? null,
        },
        now,
        deps.config.plans,
      );
      return c.json({ ok: true as const, data: { key: generated.key, ...record } }, 201);
    },
  );

  app.openapi(
    createRoute({
      method: "get",
      path: KEYS_PATH,
      tags: ["keys"],
      summary: "List API keys (optionally of one owner)",
      security,
      request: { query: listKeysQuery },
      responses: { 200: { description: "key metadata, never the plaintext", content: { "application/json": { schema: ok(keyRecord.array()) } } }, ...errors },
    }),
    async (c) => {
      const { owner_id } = c.req.valid("query");
      const rows = await listKeys(deps.db, owner_id).catch(answerStoreDown);
      const now = deps.now();
      return c.json({ ok: true as const, data: rows.map((r) => toKeyRecord(r, now, deps.config.plans)) }, 200);
    },
  );

  app.openapi(
    createRoute({
      method: "get",
      path: `${KEYS_PATH}/{id}`,
      tags: ["keys"],
      summary: "Inspect an API key",
      security,
      request: { params: keyIdParam },
      responses: {
        200: { description: "key metadata", content: { "application/json": { schema: ok(keyRecord) } } },
        404: { description: "`key_not_found`", content: { "application/json": { schema: adminError } } },
        ...errors,
      },
    }),
    async (c) => {
      const row = await readKey(deps.db, c.req.valid("param").id).catch(answerStoreDown);
      if (!row) throw notFound("key_not_found", `No key with id '${c.req.valid("param").id}'.`);
      return c.json({ ok: true as const, data: toKeyRecord(row, deps.now(), deps.config.plans) }, 200);
    },
  );

  app.openapi(
    createRoute({
      method: "delete",
      path: `${KEYS_PATH}/{id}`,
      tags: ["keys"],
      summary: "Revoke an API key",
      description: "Idempotent: revoking a revoked key answers 200 with the same record.",
      security,
      request: { params: keyIdParam },
      responses: {
        200: { description: "the revoked key", content: { "application/json": { schema: ok(keyRecord) } } },
        404: { description: "`key_not_found`", content: { "application/json": { schema: adminError } } },
        ...errors,
      },
    }),
    async (c) => {
      const { id } = c.req.valid("param");
      if (!/^[A-Za-z0-9_-]{1,128}$/.test(id)) throw notFound("key_not_found", `No key with id '${id}'.`);
      const now = deps.now();
      const { lastSeq } = await deps.keys.revoke(id, now).catch((err) => {
        if (isAppError(err) && (err.kind === "not_found" || err.kind === "conflict")) throw err;
        throw storeUnavailable(err);
      });
      // this process's key cache too: the next request here is refused (other gateways: docs/segment.md)
      await Promise.all([
        waitForProjection(deps.db, "api_keys", lastSeq, deps.config.auth.keyProjectionWaitMs).catch(() => false),
        deps.keyCache?.waitForSeq(lastSeq, deps.config.auth.keyProjectionWaitMs),
      ]);
      const row = await readKey(deps.db, id).catch(answerStoreDown);
      if (!row) throw notFound("key_not_found", `No key with id '${id}'.`);
      return c.json({ ok: true as const, data: toKeyRecord(row, now, deps.config.plans) }, 200);
    },
  );
}

/** An absent or empty body means "all defaults"; anything else must be a JSON object. */
export function readOptionalJson(text: string): unknown {
  if (text.trim() === "") return {};
  try {
    return JSON.parse(text);
  } catch {
    throw validationError("invalid_request", "The request body must be a JSON object.");
  }
}

function parseIssueBody(value: unknown) {
  const parsed = issueKeyBody.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw validationError(issueErrorCode(issue, "invalid_request"), `${issue.path.join(".") || "body"}: ${issue.message}`, { param: issue.path.join(".") || undefined });
  }
  return parsed.data;
}
