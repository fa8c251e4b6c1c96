import { z } from "zod";
import { REDACT_ENTITIES } from "./redact";
import { transcriptionSettings, turnDetection } from "./realtime";

/**
 * The realtime plane's internal messages (never on a client's socket): the audio and
 * controls the gateways publish to RT_AUDIO, the transcribe-utterance commands the VAD
 * publishes on rt.cmd, and the load reports on core NATS that admission reads. The
 * client-facing events are schemas/realtime.ts's.
 */
// ---------------------------------------------------------------- KV: the VAD's session settings

/**
 * The key (bucket `leases`) under which the VAD keeps a session's settings (its `start`
 * control as last updated) for a replica that takes the partition over, and which the
 * gateway reads when a resume needs them: one name for both sides.
 */
export const vadSessionKey = (sessionId: string) => `vad.session.${sessionId}`;
/** Beside it, a diarizing session's speakers (domain/diarization/online.ts `savedDiarization`), for a replica that takes the partition over. */
export const vadSpeakersKey = (sessionId: string) => `vad.speakers.${sessionId}`;

// ---------------------------------------------------------------- JetStream: RT_AUDIO

/**
 * Messages on rt.audio.<partition>.<sessionId>: audio (16 kHz mono PCM16LE payload) and
 * in-band control (JSON payload), so one partition consumer sees both in session order.
 * Metadata rides in headers.
 */
export const AUDIO_HEADERS = {
  kind: "Rt-Kind",
  session: "Rt-Session",
  seq: "Rt-Seq",
  /** Sample offset of the payload's first sample on the session timeline (16 kHz). */
  offset: "Rt-Offset",
} as const;

export const audioControl = z.discriminatedUnion("kind", [
  z.object({
    kind: z.literal("start"),
    turn_detection: turnDetection,
    ...transcriptionSettings,
    max_concurrent_utterances: z.number().int().positive(),
    key_id: z.string(),
    /** The key's owner (tenant), for fair scheduling; absent from older gateways. */
    owner_id: z.string().optional(),
  }),
  z.object({
    kind: z.literal("update"),
    turn_detection: turnDetection,
    ...transcriptionSettings,
  }),
  z.object({ kind: z.literal("commit"), event_id: z.string().nullable() }),
  z.object({ kind: z.literal("clear"), event_id: z.string().nullable() }),
  /** Session over; `flush` asks the VAD to commit an open utterance (graceful close). */
  z.object({ kind: z.literal("end"), flush: z.boolean() }),
  /**
   * A connection resumed the session (its `gen`-th owner): the VAD answers with
   * rt.session.resumed and the timeline position the next audio starts at.
   */
  z.object({ kind: z.literal("resume"), gen: z.number().int().positive() }),
]);
export type AudioControl = z.infer<typeof audioControl>;

// ---------------------------------------------------------------- JetStream: rt.cmd (utterances)

/**
 * The transcribe-utterance command on rt.cmd.<sessionId>: payload is the utterance's
 * 16 kHz mono PCM16LE; the rest rides in the JSON header `Rt-Utterance`.
 */
export const UTTERANCE_HEADER = "Rt-Utterance";
export const utteranceCommand = z.object({
  session_id: z.string(),
  item_id: z.string(),
  key_id: z.string(),
  /** The session's owner (tenant), for fair scheduling; absent: read from rt.session.opened. */
  owner_id: z.string().optional(),
  audio_start_ms: z.number().int().nonnegative(),
  audio_end_ms: z.number().int().nonnegative(),
  language: z.string().nullable(),
  prompt: z.string().nullable(),
  model: z.string().nullable(),
  /** Absent or empty: none. */
  keyterms: z.array(z.string()).optional(),
  max_concurrent_utterances: z.number().int().positive(),
  /** Absent: on (the default). */
  smart_format: z.boolean().optional(),
  /** Absent or empty: nothing redacted. */
  redact: z.array(z.enum(REDACT_ENTITIES)).optional(),
  /** Wall-clock ms when the VAD decided the utterance ended, for latency measurement. */
  decided_at: z.number(),
  /**
   * A re-decoded item (partials from an engine that decodes whole clips): the words its
   * deltas sent, as recognised and as shown (`entity`: redacted). The final keeps them and
   * its last delta carries the rest, so the deltas add up to `completed.transcript`.
   * Absent: nothing was sent, the final is one delta. (The raw words travel as the
   * command's audio does, on rt.cmd, never to a client.)
   */
  emitted: z.array(z.object({ word: z.string(), form: z.string(), entity: z.string().optional() })).optional(),
  /** With `diarize`: the item's speaker and its runs of one speaker (ms on the session timeline), labelled by the VAD as it commits the item. */
  speaker: z.string().optional(),
  /** The speaker's role, where the session's `speaker_roles` names it. */
  speaker_role: z.string().optional(),
  speaker_turns: z.array(z.object({ start_ms: z.number().int(), end_ms: z.number().int(), speaker: z.string() })).optional(),
});
export type UtteranceCommand = z.infer<typeof utteranceCommand>;

// ---------------------------------------------------------------- core NATS: rt.backlog

/**
 * An rt-transcriber replica's backlog, published about every 500 ms on core subject
 * `<prefix>.rt.backlog` (shared/realtime-backlog.ts). Gateways refuse upgrades while a
 * fresh one is `saturated`; replicas split the engines' capacity by how many they see.
 */
export const transcriberBacklog = z.object({
  replica: z.string(),
  queued: z.number().int().nonnegative(),
  local_in_flight: z.number().int().nonnegative(),
  fallback_in_flight: z.number().int().nonnegative(),
  capacity: z.number().int().nonnegative(),
  oldest_wait_ms: z.number().nonnegative(),
  max_wait_ms: z.number().int().positive(),
  expired: z.number().int().nonnegative(),
  saturated: z.boolean(),
  /** ms since epoch of this report. */
  at: z.number(),
});
export type TranscriberBacklog = z.infer<typeof transcriberBacklog>;

// ---------------------------------------------------------------- core NATS: rt.load

/**
 * A VAD replica's load, published about every 500 ms on core subject `<prefix>.rt.load`
 * (shared/realtime-backlog.ts): how late it reads audio (a batch handled − the batch
 * stored, worst over the interval) and its event-loop delay (p99 over the interval).
 * Gateways admit new sessions only while these stay low (domain/sessions/admission.ts).
 */
export const vadLoad = z.object({
  replica: z.string(),
  lag_ms: z.number().nonnegative(),
  loop_delay_ms: z.number().nonnegative(),
  /**
   * Its streaming decoders (absent without them): the share of its machine's cores they
   * used over the interval, how many were decoding an utterance at the report, the
   * pool's size, the share one continuous speaker costs (measured, or the configured
   * prior until a speaker has been measured), and how many speakers are still talking
   * (utterances open and sessions in a pause between two; absent from an older replica:
   * `busy` stands for them), and how many decoders are held by an open utterance now
   * (`held`; the pool is full when every decoder is). Admission counts the speakers, not
   * `busy` or `load`: a decoder finishing a committed utterance (a closed session's last
   * words) is a transient, not a speaker.
   */
  engine: z
    .object({
      load: z.number().nonnegative(),
      busy: z.number().int().nonnegative(),
      size: z.number().int().nonnegative(),
      per_speaker: z.number().nonnegative(),
      speakers: z.number().int().nonnegative().optional(),
      held: z.number().int().nonnegative().optional(),
    })
    .optional(),
  /** ms since epoch of this report. */
  at: z.number(),
});
export type VadLoad = z.infer<typeof vadLoad>;
