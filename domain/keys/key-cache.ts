import { DeliverPolicy, type ConsumerMessages } from "@nats-io/jetstream";
import type { PlanCatalog } from "../../schemas/plans";
import { createAuthThrottle, isAuthFailure } from "../../shared/auth-throttle";
import type { Config } from "../../shared/config";
import type { Db } from "../../shared/db/index";
import type { Logger } from "../../shared/logger";
import type { Nats } from "../../shared/nats";
import { assertKeyRow, bearerKeyHash, principalFromRow, type Principal } from "./auth";
import { keyEventEnvelope } from "./events";
import { readKeyByHash, type KeyRow } from "./queries";

/**
 * API keys held in memory, so a request does not wait on Postgres to authenticate, and
 * the key stream followed live, so a revocation reaches this process (and its open
 * realtime sessions) at once. Both gateways run one.
 *
 * - An entry is the api_keys row of a key hash, read from Postgres on the first request
 *   that presents it and kept for `ttlMs` at most (the backstop for changes that never
 *   pass through the key stream: a projection rebuild, a hand edit). `ttlMs` 0: every
 *   request reads Postgres; the stream is followed all the same.
 * - The key event stream is followed live (an ordered consumer on `key.evt.>`):
 *   KeyRevoked marks the key revoked here at once, whatever the cached row or the
 *   api_keys projection (possibly behind) says, and tells the `onRevoked` listeners (the
 *   realtime gateway closes the key's sessions). A revocation arrives in the time the
 *   event takes (milliseconds; docs/keys-and-auth.md bounds it at 1 s) and is remembered
 *   for as long as the process runs. At start the feed replays the last `replayMs` of
 *   key events, covering revocations the projection may not have applied yet.
 * - While the feed is down (NATS disconnected, consumer lost) the caches are bypassed
 *   and every request reads Postgres; the feed resumes after the last event it applied,
 *   so no revocation is skipped (sessions of a key revoked meanwhile close when it does).
 * - Unknown keys: a hash Postgres does not know is remembered for `negativeTtlMs`
 *   (default 5 s, at most 10,000 hashes), so a client retrying a wrong key costs one
 *   lookup per TTL. A KeyIssued for the hash seen on the feed drops the entry and keeps
 *   it from being written again (a lookup that raced the issue), so a new key is never
 *   refused for being unknown once its event has arrived here.
 * - Failed authentication is throttled per source (shared/auth-throttle.ts) before any
 *   Postgres lookup; a key found in memory is served whatever its source's count.
 */
export interface KeyCache {
  /**
   * Authenticates `Authorization: Bearer sk-…` (the same answers as authenticateApiKey).
   * With `source` (the client's address), a 401 counts against it and a source over the
   * limit is 429 too_many_auth_failures unless the key is held in memory.
   */
  authenticate(authorization: string | undefined | null, now: Date, source?: string): Promise<Principal>;
  /** The same throttle around a credential checked elsewhere (session tokens). */
  throttled<T>(source: string | undefined, attempt: () => Promise<T>): Promise<T>;
  /** Whether the feed has seen the key revoked (the read model may still be behind). */
  isRevoked(keyId: string): boolean;
  /** Calls `listener` with the key id of every KeyRevoked the feed applies; returns the unsubscribe. */
  onRevoked(listener: (keyId: string) => void): () => void;
  /** Resolves once the feed has applied the key stream up to `seq`, or after `timeoutMs`. */
  waitForSeq(seq: number, timeoutMs: number): Promise<boolean>;
  stop(): Promise<void>;
}

interface KeyCacheOptions {
  nats: Nats;
  db: Db;
  plans: PlanCatalog;
  logger: Logger;
  /** How long an entry is trusted without a Postgres read (default 30 s; 0: never). */
  ttlMs?: number;
  /** How long a hash Postgres does not know is answered 401 without a read (default 5 s; 0: never). */
  negativeTtlMs?: number;
  /** Failed authentications per source and minute before 429 (default 30). */
  authFailuresPerMinute?: number;
  /** How much of the key stream the feed replays at start (default 10 min). */
  replayMs?: number;
  /** Monotonic clock in ms (tests). */
  clock?: () => number;
}

interface Entry {
  row: KeyRow;
  loadedAt: number;
}

const MAX_ENTRIES = 100_000;
const MAX_UNKNOWN = 10_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function startKeyCache(options: KeyCacheOptions): Promise<KeyCache> {
  const { nats, db, plans, logger } = options;
  const ttlMs = options.ttlMs ?? 30_000;
  const negativeTtlMs = options.negativeTtlMs ?? 5_000;
  const clock = options.clock ?? (() => performance.now());
  const throttle = createAuthThrottle({ limit: options.authFailuresPerMinute ?? 30 });
  const entries = new Map<string, Entry>();
  /** hash → when Postgres said it does not exist. */
  const unknown = new Map<string, number>();
  /** Hashes of keys the feed has seen issued: never answered from `unknown`. */
  const issued = new Set<string>();
  const revokedListeners = new Set<(keyId: string) => void>();
  /** keyId → revokedAt, from the feed: applied over any row, cached or read. */
  const revoked = new Map<string, Date>();
  const lastUsed = new Map<string, Date>();
  const loading = new Map<string, Promise<KeyRow | undefined>>();
  let live = false;
  let stopped = false;
  let appliedSeq = 0;
  let messages: ConsumerMessages | undefined;

  const overlay = (row: KeyRow): KeyRow => {
    const revokedAt = revoked.get(row.id);
    const usedAt = lastUsed.get(row.id);
    if (!revokedAt && !usedAt) return row;
    return {
      ...row,
      revoked_at: row.revoked_at ?? revokedAt ?? null,
      last_used_at: usedAt && (!row.last_used_at || usedAt > row.last_used_at) ? usedAt : row.last_used_at,
    };
  };

  const runFeed = async () => {
    const start =
      appliedSeq > 0
        ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: appliedSeq + 1 }
        : { deliver_policy: DeliverPolicy.StartTime, opt_start_time: new Date(Date.now() - (options.replayMs ?? 600_000)).toISOString() };
    const consumer = await nats.js.consumers.get(nats.topology.streams.keys.name, { filter_subjects: nats.topology.subjects.keyEvents, ...start });
    messages = await consumer.consume({ max_messages: 256 });
    // usable once it has caught up with what the stream held when it started
    if ((await consumer.info()).num_pending === 0) live = true;
    for await (const m of messages) {
      if (stopped) break;
      // a message that is not JSON is stepped over like one that does not parse: throwing
      // here would restart the feed on the same message forever
      let body: unknown;
      try {
        body = m.json();
      } catch {
        body = undefined;
      }
      const parsed = keyEventEnvelope.safeParse(body);
      if (parsed.success) {
        const e = parsed.data;
        if (e.type === "KeyRevoked") {
          const first = !revoked.has(e.data.keyId);
          revoked.set(e.data.keyId, new Date(e.data.revokedAt));
          if (first) {
            for (const listener of revokedListeners) {
              try {
                listener(e.data.keyId);
              } catch (err) {
                logger.error("revocation listener failed", { keyId: e.data.keyId, error: String((err as Error)?.message ?? err) });
              }
            }
          }
        } else if (e.type === "KeyIssued") {
          if (issued.size >= MAX_ENTRIES) {
            // forgetting which hashes were issued could let a stale "unknown" stand: drop those too
            issued.clear();
            unknown.clear();
          }
          issued.add(e.data.keyHash);
          unknown.delete(e.data.keyHash);
        } else if (e.type === "KeyUsed") {
          if (lastUsed.size > MAX_ENTRIES) lastUsed.clear();
          lastUsed.set(e.data.keyId, new Date(e.data.usedAt));
        }
      }
      appliedSeq = m.seq;
      if (m.info.pending === 0) live = true;
    }
  };

  const unhook = nats.onReconnect(() => {
    // not trusted to resume by itself (a restarted server forgot it): restart after appliedSeq
    live = false;
    void messages?.close().catch(() => undefined);
  });
  const loop = (async () => {
    let backoff = 250;
    while (!stopped) {
      try {
        await runFeed();
        backoff = 250;
      } catch (err) {
        if (stopped) break;
        logger.warn("key event feed interrupted: authenticating from Postgres until it resumes", { error: String((err as Error)?.message ?? err) });
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 5000);
      } finally {
        live = false;
        await messages?.close().catch(() => undefined);
      }
    }
  })();
  // the first request should find the feed running
  const deadline = Date.now() + 5000;
  while (!live && Date.now() < deadline) await sleep(5);

  const load = (hash: string): Promise<KeyRow | undefined> => {
    const pending = loading.get(hash);
    if (pending) return pending;
    const p = readKeyByHash(db, hash).finally(() => loading.delete(hash));
    loading.set(hash, p);
    return p;
  };

  const countFailure = (source: string | undefined, err: unknown) => {
    if (source !== undefined && isAuthFailure(err)) throttle.recordFailure(source, clock());
  };

  const authenticate = async (authorization: string | undefined | null, now: Date, source: string | undefined, attempt: { counted: boolean }): Promise<Principal> => {
    const hash = bearerKeyHash(authorization);
    const usable = live && nats.health().ok;
    const cached = usable ? entries.get(hash) : undefined;
    let row: KeyRow | undefined;
    if (cached && clock() - cached.loadedAt < ttlMs) row = cached.row;
    else {
      const unknownAt = usable ? unknown.get(hash) : undefined;
      if (unknownAt !== undefined && clock() - unknownAt < negativeTtlMs && !issued.has(hash)) assertKeyRow(undefined, hash);
      const loadedAt = clock();
      const pending = loading.get(hash);
      if (pending) row = await pending; // a lookup already under way costs nothing more
      else if (source === undefined) row = await load(hash);
      else {
        await throttle.beginLookup(source, loadedAt);
        let unknownKey = false; // a store error is not a failed authentication
        try {
          row = await load(hash);
          unknownKey = !row;
        } finally {
          // an unknown key is counted here, before the next lookup of the source is let in
          throttle.endLookup(source, unknownKey, clock());
          attempt.counted = unknownKey;
        }
      }
      if (row && usable) {
        if (entries.size >= MAX_ENTRIES) entries.clear();
        entries.set(hash, { row, loadedAt });
      } else entries.delete(hash);
      if (!row && usable && negativeTtlMs > 0 && !issued.has(hash)) {
        unknown.delete(hash);
        if (unknown.size >= MAX_UNKNOWN) unknown.delete(unknown.keys().next().value!);
        unknown.set(hash, loadedAt);
      }
    }
    assertKeyRow(row, hash);
    return principalFromRow(overlay(row), now, "api_key", plans);
  };

  return {
    async authenticate(authorization, now, source) {
      const attempt = { counted: false };
      try {
        return await authenticate(authorization, now, source, attempt);
      } catch (err) {
        if (!attempt.counted) countFailure(source, err);
        throw err;
      }
    },
    async throttled(source, attempt) {
      if (source !== undefined) throttle.assertAllowed(source, clock());
      try {
        return await attempt();
      } catch (err) {
        countFailure(source, err);
        throw err;
      }
    },
    isRevoked: (keyId) => revoked.has(keyId),
    onRevoked(listener) {
      revokedListeners.add(listener);
      return () => {
        revokedListeners.delete(listener);
      };
    },
    async waitForSeq(seq, timeoutMs) {
      const end = Date.now() + timeoutMs;
      while (appliedSeq < seq) {
        if (Date.now() >= end) return false;
        await sleep(2);
      }
      return true;
    },
    async stop() {
      stopped = true;
      unhook();
      await messages?.close().catch(() => undefined);
      await loop;
    },
  };
}

/** A key cache with the process configuration's TTLs and failure limit. */
export function startConfiguredKeyCache(deps: { nats: Nats; db: Db; config: Config; logger: Logger }): Promise<KeyCache> {
  const { auth, plans } = deps.config;
  return startKeyCache({
    nats: deps.nats,
    db: deps.db,
    plans,
    logger: deps.logger,
    ttlMs: auth.keyCacheTtlMs,
    negativeTtlMs: auth.keyNegativeTtlMs,
    authFailuresPerMinute: auth.failuresPerMinute,
  });
}
