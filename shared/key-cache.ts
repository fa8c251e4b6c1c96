import { DeliverPolicy, type ConsumerMessages } from "@nats-io/jetstream";
import { keyEventEnvelope } from "../schemas/keys";
import { assertKeyRow, bearerKeyHash, principalFromRow, readKeyByHash, type KeyRow, type Principal } from "./auth";
import type { Db } from "./db/index";
import type { Logger } from "./logger";
import type { Nats } from "./nats";
import type { PlanCatalog } from "./plans";

/**
 * API keys held in memory, so a request does not wait on Postgres to authenticate.
 *
 * - An entry is the api_keys row of a key hash, read from Postgres on the first request
 *   that presents it and kept for `ttlMs` at most (the backstop for changes that never
 *   pass through the key stream: a projection rebuild, a hand edit).
 * - The key event stream is followed live (an ordered consumer on `key.evt.>`):
 *   KeyRevoked marks the key revoked here at once, whatever the cached row or the
 *   api_keys projection (possibly behind) says, so a revocation reaches this process in
 *   the time the event takes to arrive (milliseconds; docs/segment.md bounds it at 1 s).
 *   A revocation is remembered for as long as the process runs. At start the feed
 *   replays the last `replayMs` of key events, covering revocations the projection may
 *   not have applied yet.
 * - While the feed is down (NATS disconnected, consumer lost) the cache is bypassed and
 *   every request reads Postgres as before; the feed resumes after the last event it
 *   applied, so no revocation is skipped.
 * - Unknown keys are never cached: each one costs a query, as before.
 */
export interface KeyCache {
  /** Authenticates `Authorization: Bearer sk-…` (the same answers as authenticateApiKey). */
  authenticate(authorization: string | undefined | null, now: Date): Promise<Principal>;
  /** Resolves once the feed has applied the key stream up to `seq`, or after `timeoutMs`. */
  waitForSeq(seq: number, timeoutMs: number): Promise<boolean>;
  stop(): Promise<void>;
}

export interface KeyCacheOptions {
  nats: Nats;
  db: Db;
  plans: PlanCatalog;
  logger: Logger;
  /** How long an entry is trusted without a Postgres read (default 30 s). */
  ttlMs?: number;
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
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function startKeyCache(options: KeyCacheOptions): Promise<KeyCache> {
  const { nats, db, plans, logger } = options;
  const ttlMs = options.ttlMs ?? 30_000;
  const clock = options.clock ?? (() => performance.now());
  const entries = new Map<string, Entry>();
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
      const parsed = keyEventEnvelope.safeParse(m.json());
      if (parsed.success) {
        const e = parsed.data;
        if (e.type === "KeyRevoked" && process.env.X_SABOTAGE !== "1") revoked.set(e.data.keyId, new Date(e.data.revokedAt));
        else if (e.type === "KeyUsed") {
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

  return {
    async authenticate(authorization, now) {
      const hash = bearerKeyHash(authorization);
      const usable = live && nats.health().ok;
      const cached = usable ? entries.get(hash) : undefined;
      let row: KeyRow | undefined;
      if (cached && clock() - cached.loadedAt < ttlMs) row = cached.row;
      else {
        const loadedAt = clock();
        row = await load(hash);
        if (row && usable) {
          if (entries.size >= MAX_ENTRIES) entries.clear();
          entries.set(hash, { row, loadedAt });
        } else entries.delete(hash);
      }
      assertKeyRow(row, hash);
      return principalFromRow(overlay(row), now, "api_key", plans);
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
