import { headers as natsHeaders } from "@nats-io/transport-node";
import type { JetStreamClient, JetStreamManager, PubAck } from "@nats-io/jetstream";
import { DeliverPolicy } from "@nats-io/jetstream";
import type { z } from "zod";
import { randomUUID } from "node:crypto";
import type { Envelope, EventMetadata, Recorded } from "../schemas/envelope";
import { AppError, conflict } from "./errors";
import { isNotFound } from "./nats";
import { injectTraceContext } from "./telemetry";

/**
 * Event store over JetStream: one subject per aggregate instance.
 *
 * - `append` writes events with `Nats-Msg-Id` dedup (same msgID within the stream's
 *   duplicate window → stored once) and optimistic concurrency through
 *   `expect.lastSubjectSequence`.
 * - `load` folds an aggregate's subject with an ordered consumer.
 *
 * Caveat: nats-server 2.9 has no atomic batch publish. Several events appended in one
 * call with an expected sequence are published one after another, each expecting the
 * previous one's sequence; a crash midway leaves a prefix written, which deciders must
 * tolerate (they do: every event is a fact on its own, and the next command re-decides
 * from the log). With "any" they are pipelined (one round trip for the lot).
 */

type EventShape = { type: string; data: unknown };

export interface NewEvent<E extends EventShape> {
  type: E["type"];
  data: Extract<E, { type: E["type"] }>["data"];
  /** Deterministic id (e.g. `${jobId}:chunk:3`) for dedup; random when absent. */
  msgId?: string;
  metadata?: Partial<Omit<EventMetadata, "eventId">>;
}

type Expected = number | "none" | "any";

export interface AppendOptions {
  /** Expected last sequence of the subject: a number, "none" (no events yet) or "any". */
  expected?: Expected;
  /** The clock, passed in so callers stay testable. */
  now?: () => Date;
  timeoutMs?: number;
}

export interface AppendResult {
  /** Sequence of the last event written (or found duplicate). */
  lastSeq: number;
  seqs: number[];
  duplicates: number;
}

/**
 * Appends events to `subject`, validating each envelope with `schema`. With `expected`
 * the first event must follow that sequence and the rest follow each other; with
 * "any" (the default) no order is asserted.
 */
export async function appendEvents<E extends EventShape>(
  js: JetStreamClient,
  schema: z.ZodType<Envelope<E>>,
  subject: string,
  events: NewEvent<E>[],
  options: AppendOptions = {},
): Promise<AppendResult> {
  const now = options.now ?? (() => new Date());
  const publish = (e: NewEvent<E>, expected: Expected): Promise<PubAck> => {
    const eventId = e.msgId ?? randomUUID();
    const envelope = schema.parse({
      type: e.type,
      data: e.data,
      metadata: { version: 1, occurredAt: now().toISOString(), ...e.metadata, eventId },
    });
    const h = natsHeaders();
    h.set("Event-Type", envelope.type);
    injectTraceContext(h);
    return js
      .publish(subject, JSON.stringify(envelope), {
        msgID: eventId,
        headers: h,
        timeout: options.timeoutMs ?? 5000,
        expect: expected === "any" ? undefined : { lastSubjectSequence: expected === "none" ? 0 : expected },
      })
      .catch((err) => {
        if (isWrongLastSequence(err)) {
          throw conflict("concurrent_modification", `another writer appended to ${subject} first`, { cause: err });
        }
        throw new AppError("unavailable", "event_store_unavailable", `could not append to ${subject}`, { cause: err });
      });
  };
  let acks: PubAck[];
  let expected: Expected = options.expected ?? "any";
  if (expected === "any") {
    // No order asserted: every event is sent before any ack is awaited (one connection
    // keeps them in order on the wire and in the stream), so n events cost one round
    // trip; other writers may interleave (e.g. VAD and transcriber events of one
    // realtime session). A failure midway may leave later events stored and earlier
    // ones not; each is a fact on its own with its own dedup id, so a retry fills in.
    acks = await Promise.all(events.map((e) => publish(e, "any")));
  } else {
    // With an expectation the batch stays contiguous: each event expects the one before.
    acks = [];
    for (const e of events) {
      const ack = await publish(e, expected);
      acks.push(ack);
      expected = ack.seq;
    }
  }
  const seqs = acks.map((a) => a.seq);
  return { lastSeq: seqs.at(-1) ?? 0, seqs, duplicates: acks.filter((a) => a.duplicate).length };
}

function isWrongLastSequence(err: unknown): boolean {
  const e = err as { api_error?: { err_code?: number }; message?: string };
  return e?.api_error?.err_code === 10071 || /wrong last sequence/i.test(e?.message ?? "");
}

export interface Loaded<E extends EventShape> {
  events: Recorded<E>[];
  /** Last sequence of the subject; 0 when it has no events. */
  lastSeq: number;
}

/** Reads every event of one subject, in order. */
export async function loadEvents<E extends EventShape>(
  js: JetStreamClient,
  jsm: JetStreamManager,
  stream: string,
  schema: z.ZodType<Envelope<E>>,
  subject: string,
): Promise<Loaded<E>> {
  let lastSeq: number;
  try {
    const last = await jsm.streams.getMessage(stream, { last_by_subj: subject });
    if (!last) return { events: [], lastSeq: 0 };
    lastSeq = last.seq;
  } catch (err) {
    if (isNotFound(err)) return { events: [], lastSeq: 0 };
    throw new AppError("unavailable", "event_store_unavailable", `could not read ${subject}`, { cause: err });
  }
  const consumer = await js.consumers.get(stream, { filter_subjects: subject, deliver_policy: DeliverPolicy.All });
  const events: Recorded<E>[] = [];
  try {
    while (true) {
      const batch = await consumer.fetch({ max_messages: 256, expires: 2000 });
      let done = false;
      let got = 0;
      for await (const m of batch) {
        got++;
        events.push({ event: schema.parse(m.json()), seq: m.seq, subject: m.subject, time: new Date(m.info.timestampNanos / 1e6) });
        if (m.seq >= lastSeq) {
          done = true;
          break;
        }
      }
      if (done || got === 0) break;
    }
  } finally {
    await consumer.delete().catch(() => undefined);
  }
  return { events, lastSeq };
}

/** Folds an aggregate: `evolve` over its events from `initial`. */
export async function loadAggregate<E extends EventShape, S>(
  js: JetStreamClient,
  jsm: JetStreamManager,
  stream: string,
  schema: z.ZodType<Envelope<E>>,
  subject: string,
  initial: S,
  evolve: (state: S, event: Envelope<E>) => S,
): Promise<{ state: S; lastSeq: number; events: Recorded<E>[] }> {
  const { events, lastSeq } = await loadEvents(js, jsm, stream, schema, subject);
  const state = events.reduce((s, r) => evolve(s, r.event), initial);
  return { state, lastSeq, events };
}
