import type { KV } from "@nats-io/kv";
import { type TurnDetection } from "../../schemas/realtime";
import { audioControl, vadSessionKey, vadSpeakersKey } from "../../schemas/realtime-internal";
import { restoredDiarization, savedDiarization, type OnlineDiarization } from "../../domain/diarization/online";
import { initialState, type DeciderState, type StartControl } from "../../domain/sessions/decider";
import type { SessionStore } from "../../domain/sessions/store";
import { VAD_SAMPLE_RATE, type VadEngine, type VadSegmenter } from "../../shared/audio/vad";
import type { Logger } from "../../shared/logger";
import type { Nats } from "../../shared/nats";
import type { StreamDecoderPool, StreamUtterance } from "./stream-decoders";
import type { EmittedWord } from "../../domain/transcript/item-transcript";
import { AudioRing } from "./streaming";
import { timingOf } from "../../domain/sessions/end-of-turn";
import type { ProsodyVerdict } from "../../domain/sessions/prosody";
import type { SessionSpeakers } from "./speaker-labels";

/**
 * What the VAD holds per session, in memory on the partition's owner: the decider's
 * state (settings, item ids), the WebRTC segmenter, and with streaming the recent audio
 * and the open streamed utterance. The settings are also kept in KV
 * (`vad.session.<sessionId>`, bucket `leases`), so a replica that takes a partition over
 * mid-session restores them (`restoreSession`); the segmenter realigns on the audio's
 * sample offsets, and speech open at the handover is detected again as a new item.
 */
export interface SessionState {
  /** What the session decider knows (settings, item ids). */
  decider: DeciderState;
  seg: VadSegmenter;
  partition: number;
  settingsSavedAt: number;
  lastSeen: number;
  /** Recent audio (streaming only), for the prefix padding before speech_started. */
  ring: AudioRing | null;
  stream: OpenStream | null;
  /**
   * The open item when no decoder was free at its speech_started: it is queued for the
   * first one that frees (stream-items.ts).
   */
  awaiting: AwaitingItem | null;
  /** When (ms since epoch) the session's last item began or was committed: a pause shorter than SPEAKER_PAUSE_MS since then still counts it as a speaker (vad-consumer.ts). */
  spokeAt: number;
  /** CMN estimate the session's last streamed utterance ended with. */
  cmn: number[] | null;
  /** semantic_vad: the pause (its first silent sample) the early signal was given for, if any (turn-taking.ts). */
  turnSignalled: number | null;
  /** semantic_vad: what the pitch before the current pause said (its first silent sample), read once per pause (turn-taking.ts). */
  turnProsody: { at: number; verdict: ProsodyVerdict } | null;
  /** With `diarize`: the session's speakers so far (speaker-labels.ts); null until its first item. */
  speakers: SessionSpeakers | null;
}

/** An item queued for a free streaming decoder (stream-items.ts openStream). */
export interface AwaitingItem {
  item: string;
  /** Timeline sample of the item's first sample. */
  startSample: number;
  /** Leaves the pool's queue. */
  cancel: () => void;
  /** Set once the item is committed while still queued: the decoder, when granted, ends it at once. */
  committed: ((utt: StreamUtterance) => void) | null;
}

/** The running hypothesis as last read, for the semantic end of turn (turn-taking.ts). */
interface HeardWords {
  text: string;
  words: number;
  /** log10 P(</s> | the last two words), or null. */
  endOfSentence: number | null;
  /** Timeline sample fed when it was read (-1: never read). */
  readAt: number;
  /** `readAt` of the first read that had these words. */
  changedAt: number;
  /** `fed` when the pause read in flight was asked for (null: none in flight). */
  pendingAt: number | null;
}

/** An utterance being decoded while spoken (stream-items.ts). */
export interface OpenStream {
  item: string;
  utt: StreamUtterance;
  /** Timeline sample of the utterance's first sample; word times count from it. */
  startSample: number;
  /** Timeline position fed so far. */
  fed: number;
  /** `fed` when the running hypothesis was last read. */
  hypAt: number;
  hypBusy: boolean;
  ended: boolean;
  previous: string[] | null;
  /** Words out in deltas: as recognised and as shown. */
  emitted: EmittedWord[];
  lastInterim: string;
  heard: HeardWords;
}

/** What handling a partition's entries needs, one per VAD process. */
export interface HandleEnv {
  engine: VadEngine;
  sessions: Map<string, SessionState>;
  defaults: TurnDetection;
  nats: Nats;
  /** rt.evt's one writer: the decider's events, partials and streamed finals go through it. */
  store: SessionStore;
  kv: KV;
  pool: StreamDecoderPool | null;
  log: Logger;
  /**
   * Per partition, adds to what its next ack waits for: effects decided between its
   * messages (a semantic end of turn decided when the hypothesis arrives, turn-taking.ts).
   */
  track: Map<number, (stored: Promise<unknown>) => void>;
  /** The event loop's time spent labelling speakers (speaker-labels.ts), ms so far: part of what a diarizing speaker costs (vad-consumer.ts). */
  labelling: { ms: number };
}

/** Enough for the longest prefix padding (2 s) plus the VAD's 300 ms start window. */
const RING_SAMPLES = 3 * VAD_SAMPLE_RATE;

const settingsKey = vadSessionKey;

export function newState(env: HandleEnv, decider: DeciderState, partition: number): SessionState {
  return {
    decider,
    ring: env.pool ? new AudioRing(RING_SAMPLES) : null,
    stream: null,
    awaiting: null,
    spokeAt: 0,
    cmn: null,
    turnSignalled: null,
    turnProsody: null,
    speakers: null,
    seg: env.engine.createSegmenter(segmenterSettings(decider.settings.turn_detection)),
    partition,
    settingsSavedAt: 0,
    lastSeen: Date.now(),
  };
}

/** The segmenter's settings: semantic_vad's silence bound is its eagerness's longest wait (turn-taking.ts ends turns sooner). */
export function segmenterSettings(t: TurnDetection): TurnDetection {
  return t.type === "semantic_vad" ? { ...t, silence_duration_ms: timingOf(t.eagerness ?? "auto").maxMs } : t;
}

/** Keeps the session's settings for a takeover; null deletes them (the session is over), and its speakers with them. */
export function saveSettings(env: HandleEnv, sessionId: string, state: SessionState, settings: StartControl | null): Promise<unknown> {
  if (!settings) return Promise.all([env.kv.delete(settingsKey(sessionId)), state.speakers ? env.kv.delete(vadSpeakersKey(sessionId)) : undefined]);
  state.settingsSavedAt = Date.now();
  return env.kv.put(settingsKey(sessionId), JSON.stringify(settings));
}

/** A session this replica has not seen start (a takeover): its saved settings, or the defaults. */
export async function restoreSession(env: HandleEnv, sessionId: string, partition: number) {
  const parsed = audioControl.safeParse(await savedJson(env, settingsKey(sessionId)));
  // never saved, already ended or not readable: the defaults, as before the session's start
  const settings: StartControl = parsed.success && parsed.data.kind === "start" ? parsed.data : { kind: "start", turn_detection: env.defaults, language: null, prompt: null, model: null, max_concurrent_utterances: 2, key_id: "unknown" };
  const state = newState(env, initialState(settings), partition);
  state.settingsSavedAt = Date.now();
  // a diarizing session keeps its speakers: the labels it sent go on meaning the same people
  const speakers = settings.diarize ? restoredDiarization(await savedJson(env, vadSpeakersKey(sessionId))) : null;
  if (speakers) state.speakers = { state: speakers, chain: Promise.resolve() };
  env.sessions.set(sessionId, state);
}

/** A KV value kept for a takeover, parsed; null when absent, deleted, unreachable or not JSON (the session then starts from the defaults, never stuck on it). */
async function savedJson(env: HandleEnv, key: string): Promise<unknown> {
  const entry = await env.kv.get(key).catch(() => null);
  if (entry?.operation !== "PUT") return null;
  try {
    return entry.json();
  } catch {
    env.log.warn("a value kept for a takeover is not JSON; ignored", { key });
    return null;
  }
}

/**
 * Keeps a diarizing session's speakers for a takeover, after each item is labelled (one
 * KV write per item, about 8 KB per speaker; unawaited: a replica lost between the
 * labelling and the write leaves its successor one item behind, the labels it sent stand).
 */
export function saveSpeakers(env: HandleEnv, sessionId: string, speakers: OnlineDiarization) {
  env.kv.put(vadSpeakersKey(sessionId), JSON.stringify(savedDiarization(speakers))).catch((err) => env.log.warn("speakers not kept for a takeover", { session_id: sessionId, error: (err as Error).message }));
}
