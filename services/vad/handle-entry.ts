import { context, trace } from "@opentelemetry/api";
import { randomUUID } from "node:crypto";
import type { AudioControl } from "../../schemas/realtime-internal";
import { decide, type DecideContext, type DeciderInput, type Effect } from "../../domain/sessions/decider";
import type { KeyedEvent } from "../../domain/sessions/store";
import type { Logger } from "../../shared/logger";
import { tracer } from "../../shared/telemetry";
import { newState, saveSettings, segmenterSettings, type HandleEnv, type SessionState } from "./session-state";
import { watchTurn } from "./turn-taking";
import { dropStream, feedStream, openStream, transcribe } from "./stream-items";

/**
 * One entry of a partition, for one session: controls and audio become decider inputs
 * (domain/sessions/decider.ts; audio through the session's segmenter first), and the
 * decision's effects are carried out in order. The partition consumer (vad-consumer.ts)
 * reads the entries and acks them once what they caused is stored.
 */
export interface MessageMeta {
  sessionId: string;
  /** Parsed control message; null for audio or a control that did not parse. */
  control: AudioControl | null;
  isControl: boolean;
  offset: number;
  /** The message's sequence number in its session (the same when it is delivered again). */
  seq: number;
}

const FRAME_SAMPLES = 480;

/** `out` collects what the partition's ack waits for (the appends and publishes the entry caused). */
export function handleEntry(meta: MessageMeta, bytes: Uint8Array, partition: number, env: HandleEnv, log: Logger, out: Promise<unknown>[]) {
  const { sessionId, control: c, offset } = meta;
  const state = env.sessions.get(sessionId);
  if (meta.isControl) {
    if (!c) {
      log.warn("bad control message", { sessionId });
      return;
    }
    if (c.kind === "start") {
      const d = decide({ kind: "start", settings: c }, state?.decider ?? null, decideContext(sessionId));
      const fresh = newState(env, d.state!, partition);
      if (state) {
        // a restart: the old segmenter goes, its open stream (or its item queued for a
        // decoder) is the one the decision drops
        state.seg.close();
        fresh.stream = state.stream;
        fresh.awaiting = state.awaiting;
      }
      env.sessions.set(sessionId, fresh);
      apply(env, sessionId, fresh, d.effects, out);
      return;
    }
    if (!state) return; // restored before handleEntry(); gone only after `end`
    state.lastSeen = Date.now();
    switch (c.kind) {
      case "update":
        state.seg.update(segmenterSettings(c.turn_detection));
        return step(env, sessionId, state, { kind: "update", update: c }, out);
      case "commit":
        return step(env, sessionId, state, { kind: "commit", vad: state.seg.commit("commit"), seq: meta.seq, clientEventId: c.event_id }, out);
      case "clear":
        state.seg.clear();
        return step(env, sessionId, state, { kind: "clear", seq: meta.seq }, out);
      case "end":
        return step(env, sessionId, state, { kind: "end", flush: c.flush, vad: c.flush ? state.seg.commit("close") : [] }, out);
      case "resume":
        // every audio entry before this one is decided: the next audio starts where the segmenter stands
        return step(env, sessionId, state, { kind: "resume", gen: c.gen, position: state.seg.position, seq: meta.seq }, out);
      default: {
        const never: never = c;
        return never;
      }
    }
  }
  if (!state) return;
  state.lastSeen = Date.now();
  const pcm = samplesOf(bytes);
  const at = Number.isFinite(offset) ? offset : undefined;
  if (!state.ring) {
    const vad = state.seg.push(pcm, at);
    if (vad.length) step(env, sessionId, state, { kind: "audio", vad }, out);
    const turn = watchTurn(state, log, () => reconsiderTurn(env, sessionId));
    if (turn) step(env, sessionId, state, turn, out);
    return;
  }
  // Streaming: VAD frame by VAD frame, so a decoder is fed exactly from speech_started
  // on and its utterance ends within one frame of the VAD's end point.
  for (let i = 0; i < pcm.length; i += FRAME_SAMPLES) {
    const chunk = pcm.subarray(i, i + FRAME_SAMPLES);
    const chunkAt = at === undefined ? undefined : at + i;
    state.ring.append(chunk, chunkAt ?? state.seg.position);
    const vad = state.seg.push(chunk, chunkAt);
    if (vad.length) step(env, sessionId, state, { kind: "audio", vad }, out);
    feedStream(env, sessionId, state);
    // semantic_vad: a pause may end the turn before the segmenter's silence does
    const turn = watchTurn(state, log, () => reconsiderTurn(env, sessionId));
    if (turn) step(env, sessionId, state, turn, out);
  }
}

/**
 * A semantic_vad pause's hypothesis arrived between two messages: the turn is decided
 * again now rather than at the next frame (which may be 40 ms away, or never come if the
 * client stopped sending); what it stores joins the partition's next ack.
 */
function reconsiderTurn(env: HandleEnv, sessionId: string) {
  const state = env.sessions.get(sessionId);
  if (!state) return;
  const turn = watchTurn(state, env.log, () => reconsiderTurn(env, sessionId));
  if (!turn) return;
  const out: Promise<unknown>[] = [];
  step(env, sessionId, state, turn, out);
  if (out.length) env.track.get(state.partition)?.(Promise.all(out));
}

/**
 * The PCM16 samples of an audio entry, valid until the next call: a view of the message
 * when it is aligned, else a copy in one reused buffer. What is kept of them, the
 * segmenter and the streaming ring copy (a new array per entry was 7,500 ArrayBuffers a
 * second at 300 sessions).
 */
let scratch = new Int16Array(8192);
function samplesOf(bytes: Uint8Array): Int16Array {
  const n = bytes.byteLength >> 1;
  if (bytes.byteOffset % 2 === 0) return new Int16Array(bytes.buffer, bytes.byteOffset, n);
  if (scratch.length < n) scratch = new Int16Array(Math.ceil(n * 1.25));
  new Uint8Array(scratch.buffer, 0, n * 2).set(bytes.subarray(0, n * 2));
  return scratch.subarray(0, n);
}

const decideContext = (sessionId: string): DecideContext => ({ sessionId, now: Date.now(), newId: () => `evt_${randomUUID()}` });

function step(env: HandleEnv, sessionId: string, state: SessionState, input: DeciderInput, out: Promise<unknown>[]) {
  const d = decide(input, state.decider, decideContext(sessionId));
  apply(env, sessionId, state, d.effects, out);
  if (d.state) state.decider = d.state;
  else {
    state.seg.close();
    env.sessions.delete(sessionId);
  }
}

/**
 * Carries out a decision in order. Events go through the sessions store, pipelined: each
 * run of events is sent without waiting (one connection keeps them ordered on the wire
 * and in the stream), and `out` collects what the partition's ack waits for.
 */
function apply(env: HandleEnv, sessionId: string, state: SessionState, effects: Effect[], out: Promise<unknown>[]) {
  let events: KeyedEvent[] = [];
  const flush = () => {
    if (!events.length) return;
    out.push(env.store.appendDecided(sessionId, events));
    events = [];
  };
  for (const f of effects) {
    switch (f.kind) {
      case "event":
        events.push({ event: f.event, key: f.key });
        break;
      case "utterance": {
        // one trace per utterance: committed, the transcribe command (or the streamed
        // decoder's end), the transcriber, the worker and the transcript continue it
        const span = tracer.startSpan("vad utterance", { root: true, attributes: { "session.id": sessionId, "item.id": f.command.item_id, "utterance.reason": f.reason } });
        context.with(trace.setSpan(context.active(), span), () => {
          flush(); // committed is sent before the command, so the client sees it before any transcript
          const sent = transcribe(env, state, f.command, f.pcm);
          // the utterance's buffer goes back to the segmenters once its publish is stored
          // (a failed one is left to the collector: a reconnect may still send it)
          sent.then(() => f.release?.(), () => undefined);
          out.push(sent.finally(() => span.end()));
        });
        break;
      }
      case "open_stream":
        openStream(env, state, f.item, f.startSample);
        break;
      case "drop_stream":
        dropStream(state);
        break;
      case "settings":
        out.push(saveSettings(env, sessionId, state, f.settings));
        break;
      default: {
        const never: never = f;
        return never;
      }
    }
  }
  flush();
}
