import type { JsMsg } from "@nats-io/jetstream";
import { randomUUID } from "node:crypto";
import { rtEventEnvelope, UTTERANCE_HEADER, utteranceCommand, type ServerEvent, type UtteranceCommand } from "../../schemas/realtime";
import { ack, retry, runConsumer, terminate, type RunningConsumer } from "../../shared/consumer";
import { toAppError } from "../../shared/errors";
import { appendEvents } from "../../shared/event-store";
import type { Logger } from "../../shared/logger";
import { ensureConsumer, type Nats } from "../../shared/nats";
import type { WorkerRouter } from "../../shared/workers/types";
import { createUtteranceSlots } from "./utterance-slots";

/**
 * The realtime transcriber: turns transcribe-utterance commands (rt.cmd.<sessionId>,
 * from the VAD) into transcript events on rt.evt.<sessionId> through the worker router
 * (warm worker, fallback provider, breaker). A transcript is one `delta` with the whole
 * text followed by `completed` (with word timings moved onto the session timeline);
 * a router failure becomes `failed`, never a dropped item.
 *
 * maxConcurrentUtterances: at most that many utterances of one session are in the
 * router at once, across every transcriber replica (a KV slot table per session, see
 * utterance-slots.ts); more wait (nak with a short delay, so other sessions proceed).
 * If the slot table cannot be reached the utterance is transcribed anyway: a late
 * transcript is worse than one extra in flight.
 */
export interface RtTranscriberOptions {
  nats: Nats;
  logger: Logger;
  /** Read at message time: the router may be wired after this service starts. */
  router: () => WorkerRouter | undefined;
  concurrency: number;
}

const WAIT_FOR_SLOT_MS = 150;
/** Longer than any one transcription (the router's budget is seconds), shorter than the ack wait. */
const SLOT_TTL_MS = 45_000;

export async function startRtTranscriber(options: RtTranscriberOptions): Promise<RunningConsumer> {
  const { nats, logger } = options;
  const top = nats.topology;
  const durable = "rt_transcriber";
  await ensureConsumer(nats.jsm, {
    stream: top.streams.rtEvents.name,
    durable,
    filterSubject: `${top.prefix}.rt.cmd.>`,
    ackWaitMs: 60_000,
    maxDeliver: 400, // waiting for a per-session slot redelivers; see WAIT_FOR_SLOT_MS
    maxAckPending: 1000,
    deliver: "new",
  });
  const slots = createUtteranceSlots(await nats.kv("leases"), SLOT_TTL_MS);

  return runConsumer(nats.js, { stream: top.streams.rtEvents.name, durable, concurrency: options.concurrency, logger, workingEveryMs: 15_000 }, async (msg) => {
    const command = parseCommand(msg);
    if (!command) return terminate("malformed utterance command");
    const { session_id: sessionId, item_id: itemId } = command;
    const slotted = await slots.tryAcquire(sessionId, itemId, command.max_concurrent_utterances).catch((err) => {
      logger.warn("utterance slots unavailable; transcribing without a slot", { sessionId, error: (err as Error).message });
      return null;
    });
    if (slotted === false) return retry(WAIT_FOR_SLOT_MS, "session at maxConcurrentUtterances");
    const queueMs = Math.max(0, Math.round(Date.now() - msg.info.timestampNanos / 1e6));
    try {
      await transcribeOne(options, command, msg.data, queueMs);
      return ack();
    } finally {
      if (slotted) await slots.release(sessionId, itemId).catch((err) => logger.warn("could not free an utterance slot", { sessionId, error: (err as Error).message }));
    }
  });
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

async function transcribeOne(options: RtTranscriberOptions, c: UtteranceCommand, payload: Uint8Array, queueMs: number) {
  const pcm = new Int16Array(payload.byteLength >> 1);
  new Uint8Array(pcm.buffer).set(payload.subarray(0, pcm.length * 2));
  const base = { item_id: c.item_id, content_index: 0 as const };
  const router = options.router();
  let events: ServerEvent[];
  if (!router) {
    events = [{ type: "conversation.item.input_audio_transcription.failed", event_id: `evt_${randomUUID()}`, ...base, error: { type: "server_error", code: "transcription_unavailable", message: "No transcription workers are configured." } }];
  } else {
    try {
      const r = await router.transcribe({ pcm, language: c.language ?? undefined, prompt: c.prompt ?? undefined, model: c.model ?? undefined });
      const text = r.result.text.trim();
      const toMs = (s: number) => c.audio_start_ms + Math.round(s * 1000);
      events = [
        { type: "conversation.item.input_audio_transcription.delta", event_id: `evt_${randomUUID()}`, ...base, delta: text },
        {
          type: "conversation.item.input_audio_transcription.completed",
          event_id: `evt_${randomUUID()}`,
          ...base,
          transcript: text,
          language: r.result.language,
          audio_start_ms: c.audio_start_ms,
          audio_end_ms: c.audio_end_ms,
          words: r.result.words.map((w) => ({ word: w.word, start_ms: toMs(w.start), end_ms: toMs(w.end), probability: w.probability })),
          worker_id: r.workerId,
          fallback_used: r.fallbackUsed,
          worker_ms: Math.round(r.workerMs),
          queue_ms: queueMs,
        },
      ];
    } catch (err) {
      const e = toAppError(err);
      options.logger.warn("utterance transcription failed", { sessionId: c.session_id, itemId: c.item_id, code: e.code, error: e.message });
      events = [{ type: "conversation.item.input_audio_transcription.failed", event_id: `evt_${randomUUID()}`, ...base, error: { type: e.status >= 500 ? "server_error" : "invalid_request_error", code: e.code, message: e.message } }];
    }
  }
  await appendEvents(
    options.nats.js,
    rtEventEnvelope,
    options.nats.topology.subjects.rtEvent(c.session_id),
    events.map((e) => ({ type: "rt.server_event" as const, data: e, msgId: `${c.session_id}:${e.type}:${c.item_id}`, metadata: { correlationId: c.session_id } })),
  );
}
