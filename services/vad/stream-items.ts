import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { DEFAULT_PARTIAL_INTERVAL_MS, VAD_TRAILING_MS, type ServerEvent } from "../../schemas/realtime";
import { UTTERANCE_HEADER, type UtteranceCommand } from "../../schemas/realtime-internal";
import { traceHeaders } from "../../shared/telemetry";
import { msToSamples } from "../../shared/audio/vad";
import type { Nats } from "../../shared/nats";
import { completeStreamedItem, streamedDelta } from "../../domain/transcript/item-transcript";
import { decodedItemEvents, itemOutcomeEvents } from "../../domain/transcript/item-outcome";
import type { TranscribeResult } from "../../shared/workers/types";
import { transcriptPipeline } from "../../domain/transcript/pipeline";
import { ITEM_CUTS } from "../../domain/transcript/redact";
import type { StreamHypothesis, StreamUtterance } from "./stream-decoders";
import { newlyStable } from "./streaming";
import { withSpeakers } from "./speaker-labels";
import { saveSpeakers, type AwaitingItem, type HandleEnv, type OpenStream, type SessionState } from "./session-state";

/**
 * A committed utterance's way to its transcript, and the streaming half of the VAD
 * (used by handle-entry.ts when the decider's effects are carried out; partials and
 * finals are appended through the sessions store):
 *
 * - `transcribe`: the item's streamed decoder ends it (`finishStream`) if it has this
 *   item and is alive; otherwise the transcribe command on rt.cmd.<sessionId> with the
 *   whole utterance (the commit path).
 * - At speech_started the item takes a decoder from the local pool if one is free
 *   (`openStream`), fed the prefix padding and then the audio as it is read
 *   (`feedStream`); partials (stable-word deltas, opt-in interims) every
 *   partial_interval_ms of new speech (`onHypothesis`).
 */
/** The committed utterance to its transcript: through its streamed decoder, or the transcribe command. */
export function transcribe(env: HandleEnv, state: SessionState, command: UtteranceCommand, pcm: Int16Array): Promise<unknown> {
  const stream = state.stream;
  const waiting = state.awaiting;
  state.spokeAt = Date.now();
  state.stream = null;
  state.awaiting = null;
  // with diarize, the item's speakers first (speaker-labels.ts); every path below carries
  // them. A fold the labelling made (conversation.speaker.merged) is stored before the
  // item's transcript; if storing it fails, that failure is the entry's like any of its
  // appends (vad-consumer.ts logs it, unretried) and the transcript still goes
  const labels = withSpeakers(state, state.decider.settings, command, pcm, { spent: env.labelling, saved: (speakers) => saveSpeakers(env, command.session_id, speakers) });
  const announced = labels.then((r) => (r.merged.length ? env.store.appendSpeakerMerges(command.session_id, r.merged) : undefined));
  const labelled = announced.then(() => labels, () => labels).then((r) => r.command);
  const withAnnounced = (ended: Promise<unknown>) => Promise.all([ended, announced]);
  if (stream && stream.item === command.item_id && !stream.utt.lost && !stream.utt.finalByCommit) return withAnnounced(labelled.then((c) => finishStream(env, stream, c, pcm)));
  const ahead = stream?.item === command.item_id ? stream.utt.ahead?.take(pcm.length) : null;
  stream?.utt.abort();
  if (stream) stream.ended = true;
  if (waiting && waiting.item === command.item_id && env.pool?.endsItems) return withAnnounced(labelled.then((c) => whenDecoderFrees(env, waiting, c, pcm)));
  waiting?.cancel();
  // the commit path decodes the item whole and keeps the words its deltas sent (a re-decoded
  // item, redecode.ts; a decoder lost mid-item), so they still add up to its completed
  const emitted = stream?.item === command.item_id && stream.emitted.length ? stream.emitted : undefined;
  return withAnnounced(
    labelled.then((c) => {
      const withEmitted = emitted ? { ...c, emitted } : c;
      return ahead ? finishAhead(env, withEmitted, pcm, ahead) : publishUtterance(env.nats, withEmitted, pcm);
    }),
  );
}

/**
 * The item's final decoded ahead of the commit (redecode.ts `ahead`), appended with the
 * transcriber's msg ids like a streamed final; dropped (no engine was free) or failed:
 * the commit path decodes the item whole.
 */
async function finishAhead(env: HandleEnv, command: UtteranceCommand, pcm: Int16Array, ahead: Promise<TranscribeResult>): Promise<unknown> {
  const r = await ahead.catch(() => null);
  if (!r) return publishUtterance(env.nats, command, pcm);
  return env.store.appendOutcome(command.session_id, command.item_id, decodedItemEvents(command, r, 0));
}

/**
 * A re-decoded item's final ahead of its commit (redecode.ts): prepared once a pause has
 * lasted VAD_TRAILING_MS, discarded when speech resumes. From then on whatever ends the
 * item in this pause (server_vad's silence, semantic_vad, a commit) ends it VAD_TRAILING_MS
 * after its last voiced frame (shared/audio/vad.ts), so the decode holds exactly the
 * committed audio; server_vad's default silence (500 ms) leaves it 300 ms before
 * speech_stopped. A commit of other audio (an earlier semantic end, a client commit, a
 * max_utterance_ms cut) takes the commit path.
 */
function watchAhead(state: SessionState, s: OpenStream) {
  const ahead = s.utt.ahead;
  if (!ahead) return;
  const pause = state.seg.pause;
  if (!pause) return ahead.discard();
  const trailing = msToSamples(VAD_TRAILING_MS);
  if (pause.samples >= trailing) ahead.prepare(pause.fromSample, pause.fromSample + trailing - s.startSample);
}

/**
 * An item committed while it still waited for a decoder keeps its place in the queue for
 * up to COMMITTED_WAIT_MS: the decoder it gets is fed the whole utterance and ends it at
 * once (0.08 CPU-s per audio second, a few hundred ms for a long one); only past that
 * does it take the commit path, a whole-utterance decode behind the commit engine's queue.
 */
const COMMITTED_WAIT_MS = 1000;
function whenDecoderFrees(env: HandleEnv, waiting: AwaitingItem, command: UtteranceCommand, pcm: Int16Array): Promise<unknown> {
  return new Promise<StreamUtterance | null>((resolve) => {
    const timer = setTimeout(() => {
      waiting.cancel();
      resolve(null);
    }, COMMITTED_WAIT_MS);
    waiting.committed = (utt) => {
      clearTimeout(timer);
      resolve(utt);
    };
  }).then((utt): Promise<unknown> => (utt ? finishStream(env, openedStream(waiting.item, waiting.startSample, utt), command, pcm) : publishUtterance(env.nats, command, pcm)));
}

function publishUtterance(nats: Nats, command: UtteranceCommand, pcm: Int16Array) {
  const h = traceHeaders();
  h.set(UTTERANCE_HEADER, JSON.stringify(command));
  return nats.js.publish(nats.topology.subjects.rtCommand(command.session_id), new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength), {
    headers: h,
    msgID: `${command.session_id}:utterance:${command.item_id}`,
    timeout: 10_000,
  });
}


/**
 * A decoder for the new item if the pool has one free. If none is, the item queues for
 * one (`awaiting`, first come first served across the pool's sessions): the first
 * decoder that frees (another session's item ending) goes to the item that has waited
 * longest, at once, and is fed it from its first sample, which the segmenter holds
 * until the commit, so it catches up in a fraction of the time (0.08 CPU-s per audio
 * second). Before, a waiting item asked again with each of its audio entries and a new
 * item took a free decoder whenever it asked first: with as many speakers as decoders,
 * whichever session's audio came first after a decoder freed got it, and an item could
 * wait through several frees. Without the wait at all, every burst of speech starts that
 * found the decoders all busy went the commit path: no partials, and a final that waits
 * for a whole-utterance decode (docs/design/realtime.md, "Streaming recognition").
 */
export function openStream(env: HandleEnv, state: SessionState, item: string, startSample: number) {
  dropStream(state);
  const pool = env.pool;
  if (!pool || !state.ring) return;
  state.spokeAt = Date.now();
  const options = decoderOptions(state);
  const utt = pool.acquire(options);
  if (utt) return void (state.stream = openedStream(item, startSample, utt));
  const waiting: AwaitingItem = { item, startSample, cancel: () => undefined, committed: null };
  state.awaiting = waiting;
  waiting.cancel = pool.wait(options, (granted) => {
    if (waiting.committed) return waiting.committed(granted);
    if (state.awaiting !== waiting || state.stream) return granted.abort();
    state.awaiting = null;
    // the item's audio so far, which the segmenter holds; out of reach: the commit path has it
    const so = state.seg.openAudio(startSample);
    if (!so) return granted.abort();
    const s = openedStream(item, startSample, granted);
    s.utt.feed(so);
    s.fed = startSample + so.length;
    state.stream = s;
  });
}

const decoderOptions = (state: SessionState) => {
  const { prompt, keyterms, language, model } = state.decider.settings;
  return { prompt, keyterms: keyterms ?? null, cmn: state.cmn, language, model };
};

function openedStream(item: string, startSample: number, utt: StreamUtterance): OpenStream {
  return {
    item,
    utt,
    startSample,
    fed: startSample,
    hypAt: startSample,
    hypBusy: false,
    ended: false,
    previous: null,
    emitted: [],
    lastInterim: "",
    heard: { text: "", words: 0, endOfSentence: null, readAt: -1, changedAt: -1, pendingAt: null },
  };
}

/**
 * A continuous speaker's pauses: between two utterances (the silence that ends one, the
 * breath before the next) a session is still a speaker who needs a decoder in a moment;
 * counted only while talking, 20 continuous speakers looked like 14–16 at any instant,
 * and admission let in more than the engine holds once they all spoke at once.
 */
const SPEAKER_PAUSE_MS = 3000;

/**
 * The speakers still talking on this replica, for admission: sessions with an item open
 * (streamed or queued for a decoder), or whose last item began or was committed within
 * SPEAKER_PAUSE_MS. A closed session is gone from the map: what its last utterance still
 * costs while decoded is a transient, not a speaker.
 */
export function continuousSpeakers(sessions: Iterable<SessionState>, now: number): number {
  let n = 0;
  for (const s of sessions) if (s.stream || s.awaiting || (s.ring && now - s.spokeAt < SPEAKER_PAUSE_MS)) n++;
  return n;
}

/** Drops the open stream (clear, session end, handover); its item, if committed later, goes the commit path. */
export function dropStream(state: SessionState) {
  state.awaiting?.cancel();
  state.awaiting = null;
  const s = state.stream;
  if (!s) return;
  state.stream = null;
  s.ended = true;
  s.utt.abort();
}

/** Feeds what the decoder has not had yet; reads the hypothesis every partial_interval_ms of new speech. */
export function feedStream(env: HandleEnv, sessionId: string, state: SessionState) {
  const s = state.stream;
  if (!s || !state.ring || s.utt.lost) return;
  if (state.ring.end > s.fed) {
    s.utt.feed(state.ring.slice(s.fed));
    s.fed = state.ring.end;
  }
  watchAhead(state, s);
  const every = msToSamples(state.decider.settings.partial_interval_ms ?? DEFAULT_PARTIAL_INTERVAL_MS);
  if (s.hypBusy || s.fed - s.hypAt < every) return;
  s.hypAt = s.fed;
  s.hypBusy = true;
  const readAt = s.fed;
  s.utt
    .hypothesis()
    .then((hyp) => {
      noteHeard(s, hyp, readAt);
      onHypothesis(env, sessionId, state, s, hyp);
    })
    .catch(() => undefined) // a lost decoder: the commit takes the fallback
    .finally(() => (s.hypBusy = false));
}

/**
 * Keeps the latest hypothesis for the end of turn (turn-taking.ts): its words, their
 * end-of-sentence probability, and since when (timeline sample) they have not changed.
 * A decoder answers in request order, so `readAt` only grows.
 */
export function noteHeard(s: OpenStream, hyp: StreamHypothesis, readAt: number) {
  const text = hyp.words.map((w) => w.word).join(" ");
  const h = s.heard;
  s.heard = {
    text,
    words: hyp.words.length,
    endOfSentence: hyp.endOfSentence,
    readAt,
    changedAt: h.readAt < 0 || text !== h.text ? readAt : h.changedAt,
    pendingAt: h.pendingAt !== null && h.pendingAt <= readAt ? null : h.pendingAt,
  };
}

/** LocalAgreement-2: words two hypotheses in a row agree on go out as a delta; the whole hypothesis as an opt-in interim. */
function onHypothesis(env: HandleEnv, sessionId: string, state: SessionState, s: OpenStream, hyp: StreamHypothesis) {
  if (s.ended) return; // committed meanwhile: the final has the last word
  const words = hyp.words.map((w) => w.word);
  const fresh = newlyStable(s.previous, hyp.words, s.emitted.length, hyp.frames - s.utt.settleFrames);
  s.previous = words;
  const base = { item_id: s.item, content_index: 0 as const };
  const events: { event: ServerEvent; at: number }[] = [];
  if (fresh.length) {
    const { smart_format: smartFormat, prompt, keyterms, redact } = state.decider.settings;
    const d = streamedDelta(transcriptPipeline({ smartFormat, engineFormatted: hyp.formatted, prompt, keyterms, redact, cuts: ITEM_CUTS }), s.emitted, fresh);
    const e: ServerEvent = { type: "conversation.item.input_audio_transcription.delta", event_id: `evt_${randomUUID()}`, ...base, delta: d.delta };
    // a redaction stage may hold the open digit run back: no delta until it is judged
    if (d.delta) events.push({ event: e, at: s.emitted.length });
    s.emitted.push(...d.words);
  }
  const interim = words.join(" ");
  // interims are the raw hypothesis, replaced wholesale: with redaction on they are not sent
  if (state.decider.settings.interim_results && !state.decider.settings.redact?.length && interim !== s.lastInterim) {
    s.lastInterim = interim;
    const e: ServerEvent = { type: "conversation.item.input_audio_transcription.interim", event_id: `evt_${randomUUID()}`, ...base, transcript: interim };
    events.push({ event: e, at: s.fed });
  }
  if (!events.length) return;
  void env.store.appendPartials(sessionId, s.item, events).catch((err) => env.log.warn("partial not stored", { sessionId, error: (err as Error).message }));
}

/**
 * Ends the streamed utterance and appends its last delta and `completed` with the
 * transcriber's msg ids (so if both paths ever run for an item the stream keeps one).
 * A decoder lost before or during the end → the transcribe command with the whole audio.
 */
async function finishStream(env: HandleEnv, s: OpenStream, command: UtteranceCommand, pcm: Int16Array): Promise<void> {
  s.ended = true;
  const { session_id: sessionId, item_id: item, audio_start_ms: startMs, audio_end_ms: endMs } = command;
  const startSample = msToSamples(startMs);
  const endSample = startSample + pcm.length;
  if (s.fed < endSample) s.utt.feed(pcm.subarray(Math.max(0, s.fed - startSample)));
  const t0 = performance.now();
  let result;
  try {
    result = await s.utt.end();
  } catch (err) {
    env.log.warn("stream decoder lost; transcribing the committed audio whole", { sessionId, itemId: item, error: (err as Error).message });
    await publishUtterance(env.nats, s.emitted.length ? { ...command, emitted: s.emitted } : command, pcm);
    return;
  }
  const workerMs = Math.round(performance.now() - t0);
  const state = env.sessions.get(sessionId);
  if (state) state.cmn = result.cmn;
  const clamp = (ms: number) => Math.min(Math.max(ms, startMs), endMs);
  const timed = result.words.map((w) => ({ word: w.word, start_ms: clamp(startMs + Math.round(w.start * 1000)), end_ms: clamp(startMs + Math.round(w.end * 1000)), ...(w.probability === undefined ? {} : { probability: w.probability }) }));
  const final = completeStreamedItem(transcriptPipeline({ smartFormat: command.smart_format, prompt: command.prompt, keyterms: command.keyterms, redact: command.redact, cuts: ITEM_CUTS }), s.emitted, timed, startMs);
  const events = itemOutcomeEvents(command, { ...final, language: "en" }, { workerId: `stream:${hostname()}`, fallbackUsed: false, workerMs, queueMs: 0 });
  await env.store.appendOutcome(sessionId, item, events);
}
