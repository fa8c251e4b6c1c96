import type { Transaction } from "kysely";
import { DeliverPolicy, type ConsumerMessages, type JsMsg } from "@nats-io/jetstream";
import type { z } from "zod";
import { sql } from "kysely";
import type { Envelope, Recorded } from "../schemas/envelope";
import type { Database, Db } from "./db/index";
import type { Logger } from "./logger";
import type { Nats } from "./nats";
import { withSpanFromHeaders } from "./telemetry";

type EventShape = { type: string; data: unknown };

export type ProjectionLagPolicy = "bounded" | "informational";

/**
 * A projection folds one filtered slice of a stream into Postgres rows. Its last
 * applied stream sequence lives in `projection_offsets`, updated in the same
 * transaction as the rows, so a replayed or redelivered event is a no-op.
 */
export interface Projection<E extends EventShape = EventShape> {
  name: string;
  stream: string;
  filterSubject: string;
  schema: z.ZodType<Envelope<E>>;
  /** Tables this projection owns; emptied on rebuild. */
  tables: string[];
  /**
   * How /readyz judges its lag (services/http-gateway/readiness-rules.ts): `bounded`
   * (the default) when requests read it, so its oldest unapplied event may wait at most
   * READINESS_PROJECTION_MAX_LAG_MS; `informational` when only batch progress does, so
   * its lag is reported and never takes the instance out of rotation.
   */
  lagPolicy?: ProjectionLagPolicy;
  apply(trx: Transaction<Database>, recorded: Recorded<E>): Promise<void>;
}

export interface RunningProjection {
  name: string;
  /** Last sequence applied by this runner (or found applied). */
  appliedSeq(): number;
  stop(): Promise<void>;
}

async function readOffset(db: Db | Transaction<Database>, name: string, lock = false): Promise<number> {
  let q = db.selectFrom("projection_offsets").select("last_seq").where("name", "=", name);
  if (lock) q = q.forUpdate();
  const row = await q.executeTakeFirst();
  return row ? Number(row.last_seq) : 0;
}

async function ensureOffsetRow(db: Db, name: string): Promise<void> {
  await db
    .insertInto("projection_offsets")
    .values({ name, last_seq: 0, updated_at: new Date() })
    .onConflict((oc) => oc.column("name").doNothing())
    .execute();
}

async function writeOffset(trx: Transaction<Database>, name: string, seq: number): Promise<void> {
  await trx.updateTable("projection_offsets").set({ last_seq: seq, updated_at: new Date() }).where("name", "=", name).execute();
}

function toRecorded<E extends EventShape>(projection: Projection<E>, m: JsMsg): Recorded<E> {
  return {
    event: projection.schema.parse(m.json()),
    seq: m.seq,
    subject: m.subject,
    time: new Date(m.info.timestampNanos / 1e6),
  };
}

/**
 * SQLSTATE classes that say "this event's rows can never be written", whatever the
 * retry: 22 data exception (22P05 untranslatable character, 22021 invalid byte
 * sequence, 22P02 invalid text representation, 22001 value too long…), 23 integrity
 * violation (every write of a projection is serialized by its offset row lock, so a
 * constraint failure follows from the events themselves, not from a race) and 54
 * program limit exceeded (a jsonb value too large or too deep). Anything else (a
 * connection lost, 57P01 shutdown, 57014 statement timeout, 40001/40P01) may pass on
 * retry and stays "cannot apply anything right now".
 */
const poisonSqlStateClasses = new Set(["22", "23", "54"]);

/** True when `err` means this event cannot be applied, as opposed to "not now". */
function cannotApplyEvent(err: unknown): boolean {
  if ((err as { name?: string })?.name === "ZodError" || err instanceof SyntaxError) return true;
  const e = err as { code?: unknown; severity?: unknown };
  // pg's DatabaseError carries a five-character SQLSTATE and a severity; Node's
  // system errors (ECONNREFUSED…) carry neither.
  return typeof e?.code === "string" && /^[0-9A-Z]{5}$/.test(e.code) && typeof e.severity === "string" && poisonSqlStateClasses.has(e.code.slice(0, 2));
}

function describeFailure(err: unknown): string {
  const e = err as { code?: unknown; name?: string; message?: string };
  const text = typeof e?.code === "string" ? `${e.code} ${e.message ?? ""}` : `${e?.name ?? "Error"}: ${e?.message ?? String(err)}`;
  return text.slice(0, 1000);
}

interface DeadLetter {
  projection: string;
  seq: number;
  subject: string;
  error: string;
}

async function recordDeadLetter(trx: Transaction<Database>, letter: DeadLetter): Promise<void> {
  await trx
    .insertInto("projection_dead_letters")
    .values({ ...letter, recorded_at: new Date() })
    .onConflict((oc) => oc.columns(["projection", "seq"]).doUpdateSet({ subject: letter.subject, error: letter.error, recorded_at: new Date() }))
    .execute();
}

/**
 * Applies one message in its own transaction unless already applied. An event that
 * cannot be applied (see cannotApplyEvent) is recorded in `projection_dead_letters`
 * and its offset written, in a second transaction, so one bad event never wedges the
 * read model; any other failure is thrown for the runner to back off and retry.
 */
async function applyOne<E extends EventShape>(db: Db, projection: Projection<E>, m: JsMsg, logger: Logger): Promise<void> {
  try {
    const recorded = toRecorded(projection, m);
    await db.transaction().execute(async (trx) => {
      const last = await readOffset(trx, projection.name, true);
      if (recorded.seq <= last) return;
      await projection.apply(trx, recorded);
      await writeOffset(trx, projection.name, recorded.seq);
    });
  } catch (err) {
    if (!cannotApplyEvent(err)) throw err;
    const letter = { projection: projection.name, seq: m.seq, subject: m.subject, error: describeFailure(err) };
    const recorded = await db.transaction().execute(async (trx) => {
      if (m.seq <= (await readOffset(trx, projection.name, true))) return false;
      await recordDeadLetter(trx, letter);
      await writeOffset(trx, projection.name, m.seq);
      return true;
    });
    if (recorded) logger.error("projection dead-lettered an event it cannot apply", letter);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** How often a live projection checks it is not stuck behind its stream. */
const STALL_CHECK_MS = 5000;

/**
 * Applies the messages that queued up while the previous transaction ran, in one
 * transaction (group commit: under load one offset lock and one commit serve many
 * events; alone, an event is applied as soon as it arrives). When one of them cannot
 * be applied the batch rolls back and its messages go one by one through applyOne,
 * which dead-letters the bad one; offsets keep every replay a no-op.
 */
async function applyBatch<E extends EventShape>(db: Db, projection: Projection<E>, batch: JsMsg[], logger: Logger): Promise<void> {
  // each event in a span continuing its own trace (shared/telemetry.ts)
  const traced = (m: JsMsg, apply: () => Promise<void>) => withSpanFromHeaders(`projection ${projection.name}`, m.headers, apply);
  if (batch.length === 1) return traced(batch[0]!, () => applyOne(db, projection, batch[0]!, logger));
  try {
    await db.transaction().execute(async (trx) => {
      const last = await readOffset(trx, projection.name, true);
      const fresh = batch.filter((m) => m.seq > last);
      if (fresh.length === 0) return;
      for (const m of fresh) await traced(m, () => projection.apply(trx, toRecorded(projection, m)));
      await writeOffset(trx, projection.name, fresh.at(-1)!.seq);
    });
  } catch (err) {
    if (!cannotApplyEvent(err)) throw err;
    for (const m of batch) await traced(m, () => applyOne(db, projection, m, logger));
  }
}

const MAX_BATCH = 256;

/**
 * Runs a projection live: an ordered consumer from the stored offset + 1, the events
 * that arrive while a transaction runs applied together in the next (applyBatch). An
 * event it cannot apply (malformed, or refused by Postgres) is dead-lettered and
 * stepped over, so one bad message cannot wedge a read model; any other failure
 * (Postgres down) backs off and resumes from the stored offset.
 *
 * After a NATS reconnect the ordered consumer (ephemeral: a restarted nats-server has
 * forgotten it) is not trusted to resume by itself: the current one is closed and a new
 * one starts from the stored offset, once the streams are declared again.
 */
export async function startProjection<E extends EventShape>(
  nats: Nats,
  db: Db,
  projection: Projection<E>,
  logger: Logger,
): Promise<RunningProjection> {
  let applied = 0;
  let stopped = false;
  let messages: ConsumerMessages | undefined;

  const runOnce = async () => {
    await ensureOffsetRow(db, projection.name);
    const from = await readOffset(db, projection.name);
    applied = Math.max(applied, from);
    const consumer = await nats.js.consumers.get(projection.stream, {
      filter_subjects: projection.filterSubject,
      ...(from > 0 ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from + 1 } : { deliver_policy: DeliverPolicy.All }),
    });
    messages = await consumer.consume({ max_messages: 256 });
    // stopped while this was starting: stop() found no iterator to close
    if (stopped) return void messages.close().catch(() => undefined);
    const queue: JsMsg[] = [];
    let wake: (() => void) | undefined;
    let ended = false;
    const applier = (async () => {
      while (!stopped) {
        if (queue.length === 0) {
          if (ended) return;
          await new Promise<void>((r) => (wake = r));
          continue;
        }
        const batch = queue.splice(0, MAX_BATCH);
        await applyBatch(db, projection, batch, logger);
        applied = batch.at(-1)!.seq;
      }
    })();
    // a failed transaction ends the read side too, so runOnce throws and the loop resumes from the stored offset
    let failed = false;
    applier.catch(() => {
      failed = true;
      void messages?.close().catch(() => undefined);
    });
    try {
      for await (const m of messages) {
        if (stopped) break;
        queue.push(m);
        wake?.();
        // the consumer's buffer (256) is the backpressure; this bounds what waits here
        while (queue.length >= 4 * MAX_BATCH && !stopped && !failed) await new Promise((r) => setTimeout(r, 5));
      }
    } finally {
      ended = true;
      wake?.();
    }
    await applier;
  };

  const unhook = nats.onReconnect(() => {
    void messages?.close().catch(() => undefined);
  });

  // An ordered consumer lives on one node. In a cluster, when that node dies the client
  // stays connected elsewhere and no reconnect happens; nats.js may then never resume
  // it (seen in test/nats-cluster.test.ts: a read model frozen for minutes while the
  // stream went on). So: behind the stream's last event and no progress for a whole
  // check period → close it, and the loop starts a new one from the stored offset.
  let seenAtLastCheck = -1;
  const watchdog = setInterval(() => {
    void (async () => {
      const last = await nats.jsm.streams.getMessage(projection.stream, { last_by_subj: projection.filterSubject }).catch(() => null);
      const behind = last !== null && last.seq > applied;
      if (behind && applied === seenAtLastCheck && !stopped) {
        logger.warn("projection made no progress while behind its stream; restarting its consumer", { applied, head: last.seq });
        await messages?.close().catch(() => undefined);
      }
      seenAtLastCheck = behind ? applied : -1;
    })().catch(() => undefined);
  }, STALL_CHECK_MS);
  watchdog.unref();

  const loop = (async () => {
    let backoff = 250;
    while (!stopped) {
      try {
        await runOnce();
        backoff = 250;
      } catch (err) {
        if (stopped) break;
        logger.warn("projection interrupted, resuming from stored offset", { projection: projection.name, error: String((err as Error)?.message ?? err) });
        await messages?.close().catch(() => undefined);
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 5000);
      }
    }
  })();

  return {
    name: projection.name,
    appliedSeq: () => applied,
    stop: async () => {
      stopped = true;
      clearInterval(watchdog);
      unhook();
      await messages?.close().catch(() => undefined);
      await loop;
    },
  };
}

/**
 * Waits (bounded) until the projection's stored offset reaches `seq`: how a command
 * route makes its own write visible to the next request. Works across processes.
 */
export async function waitForProjection(db: Db, name: string, seq: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (true) {
    if ((await readOffset(db, name)) >= seq) return true;
    if (Date.now() >= deadline) return false;
    await sleep(10);
  }
}

/**
 * Drops a projection's rows and rebuilds them from the log, in one transaction that
 * holds the offset row's lock, so a live runner waits and then continues from the
 * rebuilt offset (it never re-applies or skips an event). Each event is applied under
 * a savepoint: one that cannot be applied is rolled back alone and dead-lettered, as
 * the live runner does (the projection's old dead letters are cleared first, so an
 * event a fixed projection now applies is no longer listed).
 */
export async function rebuildProjection<E extends EventShape>(
  nats: Nats,
  db: Db,
  projection: Projection<E>,
  logger?: Logger,
): Promise<{ applied: number; deadLettered: number; lastSeq: number }> {
  await ensureOffsetRow(db, projection.name);
  return db.transaction().execute(async (trx) => {
    await readOffset(trx, projection.name, true);
    for (const table of projection.tables) await sql`delete from ${sql.table(table)}`.execute(trx);
    await trx.deleteFrom("projection_dead_letters").where("projection", "=", projection.name).execute();
    const consumer = await nats.js.consumers.get(projection.stream, { filter_subjects: projection.filterSubject, deliver_policy: DeliverPolicy.All });
    let applied = 0;
    let deadLettered = 0;
    let lastSeq = 0;
    try {
      let pending = (await consumer.info(true)).num_pending;
      while (pending > 0) {
        const batch = await consumer.fetch({ max_messages: Math.min(pending, 1000), expires: 5000 });
        let got = 0;
        for await (const m of batch) {
          got++;
          await sql`savepoint rebuild_event`.execute(trx);
          try {
            await projection.apply(trx, toRecorded(projection, m));
            await sql`release savepoint rebuild_event`.execute(trx);
            applied++;
          } catch (err) {
            if (!cannotApplyEvent(err)) throw err;
            await sql`rollback to savepoint rebuild_event`.execute(trx);
            const letter = { projection: projection.name, seq: m.seq, subject: m.subject, error: describeFailure(err) };
            await recordDeadLetter(trx, letter);
            logger?.error("projection dead-lettered an event it cannot apply", letter);
            deadLettered++;
          }
          lastSeq = m.seq;
          pending = m.info.pending;
        }
        if (got === 0) break;
      }
    } finally {
      await consumer.delete().catch(() => undefined);
    }
    await writeOffset(trx, projection.name, lastSeq);
    return { applied, deadLettered, lastSeq };
  });
}
