import { JetStreamApiError } from "@nats-io/jetstream";
import { INTERNAL_SAMPLE_RATE, type ServerEvent } from "../../schemas/realtime";
import { type AudioControl } from "../../schemas/realtime-internal";
import type { ConnectionInput } from "../../domain/sessions/connection";
import type { SessionLimits } from "../../domain/sessions/close-rules";
import { createFrameAligner } from "../../shared/audio/resample";
import type { Admission } from "./admit";
import { announce, heldEnd } from "./session-lifecycle";
import { createAudioAllowance, createUsageMeter } from "./session-accounting";
import { forwardLaneEvents, openSessionAudio, type LanesReplay } from "./session-channels";
import type { SessionSettings } from "./client-messages";
import type { AudioBatcher } from "./audio-publisher";
import type { SessionStore } from "../../domain/sessions/store";
import type { UsageStore } from "../../domain/usage/store";
import type { Logger } from "../../shared/logger";
import type { Nats } from "../../shared/nats";

/**
 * What a realtime connection's effects run on (session.ts carries them out): its audio
 * to the VAD (aligned, counted, resampled and published per lane: session-channels.ts),
 * the key's budget claimed ahead of the audio and usage recorded (session-accounting.ts),
 * the session's events forwarded to the client (after a resume's replay: session-feed.ts),
 * and its opened and closed facts. What happens on the way (a publish failed, a claim
 * settled, an event forwarded, the VAD answered a resume) is reported to the
 * connection's decider (domain/sessions/connection.ts) as an input.
 */
export interface SessionSocket {
  /** One server event in the door's wire protocol (native JSON, or OpenAI's: openai-door.ts). uWS semantics: 1 sent, 0 buffered (backpressure), 2 dropped. */
  send(event: ServerEvent): number;
  bufferedAmount(): number;
  end(code: number, reason: string): void;
  /** A stored event a resume's replay passes over (the client has it: session-feed.ts `prior`); the OpenAI door rebuilds its state from it. */
  prior?(event: ServerEvent): void;
}

/** What a connection's I/O needs of the gateway (session.ts SessionDeps adds the gateway's callbacks). */
export interface IoDeps {
  nats: Nats;
  usage: Pick<UsageStore, "record">;
  /** The only writer of rt.evt: the session's opened and closed facts go through it. */
  sessions: SessionStore;
  logger: Logger;
  gatewayId: string;
  partitions: number;
  maxFrameBytes: number;
  /** The gateway's audio batches to JetStream (one per VAD partition per interval). */
  audio: AudioBatcher;
  /** How long a partition's batches in flight may stay over RT_MAX_PENDING_ACKS before its sessions close 1013 upstream_unavailable while NATS is down. */
  backpressureGraceMs: number;
  maxClientBufferBytes: number;
  now: () => number;
}

/** A resume credential offered to the client (schemas/realtime.ts resumeOffer). */
export interface ResumeOffer {
  credential: string;
  grace_seconds: number;
}

/**
 * How a connection starts its session: a new session, or the resume of a held one as
 * its `gen`-th owner (resume.ts): no start control and no opened fact, a resume control
 * instead; the stored events after the client's position (one per lane: a multichannel
 * session's channels each have theirs) are replayed once the VAD has answered, and audio
 * is taken from then on. `offer(gen)` is the credential for the next resume (undefined
 * when the gateway has no token secret).
 */
export type SessionStart =
  | { kind: "new"; offer(gen: number): ResumeOffer | undefined }
  | { kind: "resume"; gen: number; afterEventIds: readonly (string | null)[]; offer(gen: number): ResumeOffer | undefined };

/** What the I/O reports back: decider inputs, the events it sends, whether the connection still drives the session. */
export interface IoReports {
  report(input: ConnectionInput): void;
  send(event: ServerEvent): void;
  detached(): boolean;
}

/** How long a resumed connection waits for the VAD's answer before it closes 1013. */
const RESUME_ANSWER_WAIT_MS = 10_000;
/** A connection's audio entries and usage records are numbered from gen × these, so ids never repeat across a session's connections. */
const SEQS_PER_CONNECTION = 2 ** 20;
const USAGE_PARTS_PER_CONNECTION = 100_000;

export function partitionOf(sessionId: string, partitions: number): number {
  let h = 2166136261;
  for (let i = 0; i < sessionId.length; i++) h = Math.imul(h ^ sessionId.charCodeAt(i), 16777619);
  return (h >>> 0) % partitions;
}

/** The first audio entry a held session's ending publishers number from (after every entry of its `gen`-th connection). */
export const heldFirstSeq = (gen: number) => (gen + 1) * SEQS_PER_CONNECTION - 1;

/**
 * A publish JetStream answered with a client-class API error (e.g. 10054 "message size exceeds
 * maximum allowed" after an operator shrank the stream's limits): retrying elsewhere will not help,
 * so the session ends 1011 client_error. Timeouts, no responders, a closed connection and 5xx
 * answers are the upstream being away: 1013 upstream_unavailable, try again later.
 */
function refusedByStream(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.apiError().code < 500;
}

/** The close rules' limits for this connection: its plan's and the gateway's. */
export function sessionLimits(admission: Admission, deps: IoDeps): SessionLimits {
  const { limits } = admission;
  return {
    maxFrameBytes: deps.maxFrameBytes,
    maxAudioSecondsPerSession: limits.maxAudioSecondsPerSession,
    maxSessionSeconds: limits.maxSessionSeconds,
    idleTimeoutSeconds: limits.idleTimeoutSeconds,
    maxClientBufferBytes: deps.maxClientBufferBytes,
    backpressureGraceMs: deps.backpressureGraceMs,
  };
}

export function openConnectionIo(admission: Admission, socket: SessionSocket, deps: IoDeps, start: SessionStart, to: IoReports) {
  const { sessionId, principal } = admission;
  const log = deps.logger.child({ sessionId, keyId: principal.keyId });
  const startedAt = deps.now();
  const gen = start.kind === "resume" ? start.gen : 0;
  let inputFrames = 0; // per-channel frames at the client's rate
  // Every accepted frame holds whole sample frames (a frame that does not is refused), so
  // the aligner never carries a byte over: it only hands back a view.
  const bytesPerFrame = 2 * admission.channels;
  const aligner = createFrameAligner(bytesPerFrame);
  // multichannel: every channel's seconds count (billing, budget, the session's audio limit; docs/realtime-reference.md "Multichannel")
  const billedChannels = admission.multichannel ? admission.channels : 1;
  const audioMs = () => Math.round((inputFrames * 1000 * billedChannels) / admission.sampleRate);
  const natsHealthy = () => deps.nats.health().ok;

  // one lane to the VAD, or one per channel (session-channels.ts)
  const publisher = openSessionAudio({
    sessionId,
    sampleRate: admission.sampleRate,
    channels: admission.channels,
    multichannel: admission.multichannel,
    batcher: deps.audio,
    partitionOf: (laneId) => partitionOf(laneId, deps.partitions),
    firstSeq: gen * SEQS_PER_CONNECTION,
    onFailure: (err) => {
      const refused = refusedByStream(err);
      log.warn(refused ? "audio refused by the stream" : "audio publish failed", { error: err instanceof Error ? err.message : String(err) });
      to.report({ kind: "publish_failed", refused, natsHealthy: natsHealthy() });
    },
  });
  const budget = () => ({ audioMs: audioMs(), allowanceMs: allowance.allowanceMs, budgetExhausted: allowance.exhausted });
  const allowance = createAudioAllowance(admission.budget, { audioMs, closed: to.detached, log, settled: () => to.report({ kind: "budget_settled", ...budget() }) });
  const usage = createUsageMeter(deps.usage, admission, { startedAt, audioMs, now: deps.now, log, firstPart: gen * USAGE_PARTS_PER_CONNECTION });

  const replay: LanesReplay | undefined =
    start.kind === "resume"
      ? {
          gen,
          afterEventIds: start.afterEventIds,
          waitMs: RESUME_ANSWER_WAIT_MS,
          prior: socket.prior?.bind(socket),
          onResumed: ({ position, floorMs, replayed }) => {
            // whole milliseconds: the client resends from audio_ms, the VAD drops the overlap (< 1 ms);
            // never before what the session already decided (a VAD that restarted answers 0: it realigns on the offset)
            const audioMsAt = Math.max(floorMs, Math.floor(position / (INTERNAL_SAMPLE_RATE / 1000)));
            publisher.resumeAt(audioMsAt * (INTERNAL_SAMPLE_RATE / 1000));
            const offer = start.offer(gen);
            to.report({ kind: "resumed", offered: offer !== undefined });
            if (offer) to.send({ type: "session.resumed", event_id: feed.directEventId(), session_id: sessionId, audio_ms: audioMsAt, replayed, resume: offer });
          },
          onFailed: (err) => {
            log.warn("resume failed", { error: err.message });
            to.report({ kind: "resume_failed" });
          },
        }
      : undefined;
  const feed = forwardLaneEvents(deps.nats, publisher.lanes, to.send, (progress) => to.report({ kind: "event_forwarded", ...progress }), replay);
  const control = (message: AudioControl) => publisher.control(message);

  return {
    log,
    gen,
    startedAt,
    bytesPerFrame,
    publisher,
    allowance,
    usage,
    control,
    audioMs,
    budget,
    natsHealthy,
    newEventId: () => feed.directEventId(),
    /** The connection's start: a new session's settings to the VAD and its opened fact; a resumed one's resume control. */
    begin(settings: SessionSettings) {
      if (start.kind === "resume") {
        control({ kind: "resume", gen });
        publisher.flush();
      } else announce(admission, deps, settings, control, log);
    },
    /** A taken binary frame's samples (a view), counted. */
    take(frame: ArrayBuffer | Uint8Array): Int16Array {
      const samples = aligner.push(frame instanceof Uint8Array ? frame : new Uint8Array(frame));
      inputFrames += samples.length / admission.channels;
      return samples;
    },
    /** Stops the connection's part: no more events, its audio published, its usage recorded, its unused budget given back. */
    async release(stopped: () => void) {
      feed.unsubscribe();
      publisher.release();
      stopped();
      await publisher.settled();
      await usage.final();
      // give back the budget granted ahead of audio that never came
      await allowance.release();
    },
    recordClosed: (code: number, reason: string) =>
      deps.sessions.closed({ session_id: sessionId, code, reason, audio_ms: audioMs(), duration_ms: Math.max(0, deps.now() - startedAt) }).then(
        () => undefined,
        (err) => log.warn("could not record session event", { type: "rt.session.closed", error: (err as Error).message }),
      ),
    /** How a held session ends later (resume.ts), from plain values: not `deps` itself, whose callbacks close over the gateway's socket and this session. */
    heldHandle(code: number): { end(reason: string): Promise<void> } {
      const lanes = publisher.lanes.map((lane) => ({ id: lane.id, partition: partitionOf(lane.id, deps.partitions) }));
      const closedAs = { session_id: sessionId, code, audio_ms: audioMs(), startedAt, lanes, firstSeq: heldFirstSeq(gen) };
      return { end: heldEnd(closedAs, { audio: deps.audio, sessions: deps.sessions, now: deps.now }, log) };
    },
  };
}
