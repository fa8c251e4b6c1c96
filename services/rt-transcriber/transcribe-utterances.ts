import type { JsMsg } from "@nats-io/jetstream";
import { decodedItemEvents } from "../../domain/transcript/item-outcome";
import { randomUUID } from "node:crypto";
import { type ServerEvent } from "../../schemas/realtime";
import { UTTERANCE_HEADER, utteranceCommand, type UtteranceCommand } from "../../schemas/realtime-internal";
import type { SessionStore } from "../../domain/sessions/store";
import { ack, retry, runConsumer, terminate, type RunningConsumer } from "../../shared/consumer";
import { toAppError } from "../../shared/errors";
import type { Logger } from "../../shared/logger";
import { ensureConsumer, type Nats } from "../../shared/nats";
import { BACKLOG_EVERY_MS, publishBacklog, watchBacklog } from "../../shared/realtime-backlog";
import type { WorkerRouter } from "../../shared/workers/types";
import { createFairScheduler, type QueuedUtterance } from "../../shared/workers/fair-scheduler";
import type { PiecePolicy } from "../../domain/transcript/pieces";
import { createItemDecoder } from "./decode-item";
import { createOutcomeClaims } from "./outcome-claims";
import { createSessionOwners } from "./session-owner";
import { createUtteranceSlots } from "./utterance-slots";

/**
 * The realtime transcriber: turns transcribe-utterance commands (rt.cmd.<sessionId>,
 * from the VAD) into transcript events on rt.evt.<sessionId> (appended through the
 * sessions store, domain/sessions/store.ts) through the worker router
 * (warm worker, fallback provider, breaker). A transcript is one `delta` with the whole
 * text followed by `completed` (with word timings moved onto the session timeline); an
 * item whose re-decodes sent deltas already (`emitted`, services/vad/redecode.ts) keeps
 * those words and its last delta carries the rest;
 * a router failure becomes `failed`, never a dropped item.
 *
 * Capacity and fairness (docs/realtime.md): commands are pulled from the durable into
 * a fair scheduler (shared/workers/fair-scheduler.ts; up to `PULL_BUFFER` held per replica, kept from
 * redelivery by the consumer wrapper's `working()` heartbeats). It sends them to the
 * engines round-robin across owners, at most `capacity()` at once: the warm workers'
 * announced `capacity.requests` split over the rt-transcriber replicas seen on the
 * backlog subject, capped by RT_TRANSCRIBE_CONCURRENCY. Overflow goes to the fallback
 * provider when one is configured; otherwise an utterance not started within
 * `maxWaitMs` of its commit gets `failed` `engine_overloaded`. One outcome per item:
 * outcome-claims.ts.
 *
 * maxConcurrentUtterances: the scheduler keeps a session within it on this replica; a
 * KV slot table per session (utterance-slots.ts) keeps it across replicas (a slot held
 * elsewhere: nak with a short delay). If the slot table cannot be reached the
 * utterance is transcribed anyway: a late transcript is worse than one extra in flight.
 *
 * Every ~500 ms the replica publishes its backlog (shared/realtime-backlog.ts); the
 * realtime gateway refuses upgrades while one is saturated.
 */
export interface RtTranscriberOptions {
  nats: Nats;
  /** Where outcomes are appended (rt.evt's one writer). */
  sessions: SessionStore;
  logger: Logger;
  /** Read at message time: the router may be wired after this service starts. */
  router: () => WorkerRouter | undefined;
  /** Most utterances in the local engines at once from this replica (RT_TRANSCRIBE_CONCURRENCY). */
  concurrency: number;
  /** RT_MAX_TRANSCRIPT_WAIT_MS. */
  maxWaitMs?: number;
  /** How a long committed item is cut into pieces (the segment plane's settings, SEGMENT_*; decode-item.ts). */
  pieces: PiecePolicy & { inFlight: number };
}

export interface RunningRtTranscriber extends RunningConsumer {
  /** This replica's backlog now (tests, bench). */
  backlog(): ReturnType<ReturnType<typeof createFairScheduler>["stats"]>;
}

const WAIT_FOR_SLOT_MS = 150;
/** Longer than any one transcription (the router's budget is seconds), shorter than the ack wait. */
const SLOT_TTL_MS = 45_000;
/**
 * Commands one replica holds (queued or in flight), and the durable's bound on commands
 * delivered and not yet acked across replicas. Under overload the queue is what arrives
 * within maxWaitMs (the rest expire), so this only has to exceed that burst. Each
 * command carries its utterance (about 100 KB): nats-server closes a connection with
 * more than 64 MiB unsent as a slow consumer, and with 1,000 commands allowed out (two
 * buffers of 500, as before) a replica starved of CPU at 1,000 sessions was closed so,
 * its KV writes timed out and its commands waited out the ack wait.
 */
const PULL_BUFFER = 256;

export async function startRtTranscriber(options: RtTranscriberOptions): Promise<RunningRtTranscriber> {
  const { nats, logger } = options;
  const maxWaitMs = options.maxWaitMs ?? 5000;
  const top = nats.topology;
  const durable = "rt_transcriber";
  await ensureConsumer(nats.jsm, {
    stream: top.streams.rtEvents.name,
    durable,
    filterSubject: `${top.prefix}.rt.cmd.>`,
    ackWaitMs: 60_000,
    maxDeliver: 400, // waiting for a per-session slot redelivers; see WAIT_FOR_SLOT_MS
    maxAckPending: PULL_BUFFER,
    deliver: "new",
  });
  const leases = await nats.kv("leases");
  const slots = createUtteranceSlots(leases, SLOT_TTL_MS);
  const claims = createOutcomeClaims(leases);
  const owners = createSessionOwners(options.sessions, logger);
  const replica = `rtt-${randomUUID().slice(0, 8)}`;
  const peers = watchBacklog(nats);

  const capacity = () => {
    const engines = options.router()?.capacity?.();
    // No warm worker announced: the router answers at once (fallback or failure).
    if (!engines || engines.workers === 0) return options.concurrency;
    const replicas = Math.max(1, peers.reports().length);
    return Math.min(options.concurrency, Math.max(1, Math.floor(engines.requests / replicas)));
  };
  const scheduler = createFairScheduler({ capacity, fallback: () => options.router()?.hasFallback?.() ?? false, maxWaitMs });
  const report = () => {
    const s = scheduler.stats();
    publishBacklog(nats, {
      replica,
      queued: s.queued,
      local_in_flight: s.localInFlight,
      fallback_in_flight: s.fallbackInFlight,
      capacity: s.capacity,
      oldest_wait_ms: s.oldestWaitMs,
      max_wait_ms: maxWaitMs,
      expired: s.expired,
      saturated: s.saturated,
      at: Date.now(),
    });
    scheduler.pump(); // capacity follows the registry: a worker that came up takes work
  };
  const ticker = setInterval(report, BACKLOG_EVERY_MS);
  const decodeItem = createItemDecoder(options.pieces);
  let stopping = false;

  const consumer = await runConsumer(nats.js, { stream: top.streams.rtEvents.name, durable, concurrency: PULL_BUFFER, logger, workingEveryMs: 15_000 }, async (msg) => {
    if (stopping) return retry(0, "replica stopping");
    const command = parseCommand(msg);
    if (!command) return terminate("malformed utterance command");
    const { session_id: sessionId, item_id: itemId } = command;
    const storedAt = msg.info.timestampNanos / 1e6;
    const u: QueuedUtterance = {
      owner: command.owner_id ?? (await owners.ownerOf(sessionId, command.key_id)),
      sessionId,
      itemId,
      maxPerSession: command.max_concurrent_utterances,
      // the VAD's decision time, unless its clock runs ahead of the stream's
      committedAt: Math.min(command.decided_at, storedAt),
    };
    const grant = await scheduler.enqueue(u);
    if (grant === "stopped") return retry(0, "replica stopping");
    if (grant === "expired") {
      const decision = await claims.claim(sessionId, itemId, "overloaded");
      if (decision === "overloaded") {
        await options.sessions.appendOutcome(sessionId, itemId, [overloaded(command, maxWaitMs)]);
        logger.warn("utterance waited past RT_MAX_TRANSCRIPT_WAIT_MS: failed engine_overloaded", { sessionId, itemId, maxWaitMs });
        return ack();
      }
      // an earlier delivery already sent it to an engine: finish that decision
    }
    try {
      const slotted = await slots.tryAcquire(sessionId, itemId, command.max_concurrent_utterances).catch((err) => {
        logger.warn("utterance slots unavailable; transcribing without a slot", { sessionId, error: (err as Error).message });
        return null;
      });
      if (slotted === false) return retry(WAIT_FOR_SLOT_MS, "session at maxConcurrentUtterances on another replica");
      try {
        const decision = grant === "expired" ? "transcribe" : await claims.claim(sessionId, itemId, "transcribe");
        if (decision === "overloaded") {
          await options.sessions.appendOutcome(sessionId, itemId, [overloaded(command, maxWaitMs)]);
          return ack();
        }
        const queueMs = Math.max(0, Math.round(Date.now() - storedAt));
        await transcribeOne(options, decodeItem, command, msg.data, queueMs, { owner: u.owner, fallbackOnly: grant === "fallback" });
        return ack();
      } finally {
        if (slotted) await slots.release(sessionId, itemId).catch((err) => logger.warn("could not free an utterance slot", { sessionId, error: (err as Error).message }));
      }
    } finally {
      scheduler.release(u, grant);
    }
  });

  return {
    done: consumer.done,
    backlog: () => scheduler.stats(),
    async stop() {
      stopping = true;
      clearInterval(ticker);
      scheduler.close();
      await consumer.stop();
      peers.stop();
    },
  };
}

function parseCommand(msg: JsMsg): UtteranceCommand | null {
  const raw = msg.headers?.get(UTTERANCE_HEADER);
  if (!raw) return null;
  try {
    const parsed = utteranceCommand.safeParse(JSON.parse(raw));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

function overloaded(c: UtteranceCommand, maxWaitMs: number): ServerEvent {
  return {
    type: "conversation.item.input_audio_transcription.failed",
    event_id: `evt_${c.item_id}_overloaded`,
    item_id: c.item_id,
    content_index: 0,
    error: { type: "server_error", code: "engine_overloaded", message: `No transcription capacity within ${maxWaitMs} ms of the commit; the engines are saturated. Retry later or reduce concurrent sessions.` },
  };
}

async function transcribeOne(
  options: RtTranscriberOptions,
  decodeItem: ReturnType<typeof createItemDecoder>,
  c: UtteranceCommand,
  payload: Uint8Array,
  queueMs: number,
  turn: { owner: string; fallbackOnly: boolean },
) {
  const pcm = new Int16Array(payload.byteLength >> 1);
  new Uint8Array(pcm.buffer).set(payload.subarray(0, pcm.length * 2));
  const base = { item_id: c.item_id, content_index: 0 as const };
  const router = options.router();
  let events: ServerEvent[];
  if (!router) {
    events = [{ type: "conversation.item.input_audio_transcription.failed", event_id: `evt_${randomUUID()}`, ...base, error: { type: "server_error", code: "transcription_unavailable", message: "No transcription workers are configured." } }];
  } else {
    try {
      const request = { language: c.language ?? undefined, prompt: c.prompt ?? undefined, keyterms: c.keyterms, model: c.model ?? undefined };
      const r = await decodeItem(router, pcm, { request, owner: turn.owner, itemId: c.item_id, fallbackOnly: turn.fallbackOnly });
      events = decodedItemEvents(c, r, queueMs);
    } catch (err) {
      const e = toAppError(err);
      options.logger.warn("utterance transcription failed", { sessionId: c.session_id, itemId: c.item_id, code: e.code, error: e.message });
      events = [{ type: "conversation.item.input_audio_transcription.failed", event_id: `evt_${randomUUID()}`, ...base, error: { type: e.status >= 500 ? "server_error" : "invalid_request_error", code: e.code, message: e.message } }];
    }
  }
  // ids `<session>:<event type>:<item>` (the store's rule): a repeat of the same outcome is dropped by JetStream
  await options.sessions.appendOutcome(c.session_id, c.item_id, events);
}
