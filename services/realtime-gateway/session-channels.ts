import { INTERNAL_SAMPLE_RATE, type ServerEvent } from "../../schemas/realtime";
import { type AudioControl } from "../../schemas/realtime-internal";
import { pickChannel } from "../../shared/audio/channels";
import { createResampler, type Resampler } from "../../shared/audio/resample";
import type { Nats } from "../../shared/nats";
import type { AudioBatcher, AudioPublisher } from "./audio-publisher";
import { forwardSessionEvents, type FeedProgress, type ReplayRequest, type SessionFeed } from "./session-feed";

/**
 * A session's audio on its way to the VAD, as one lane or one lane per channel
 * (docs/realtime-reference.md "Multichannel").
 *
 * Without `multichannel` (the default) the session is one lane under its own id: its
 * audio mixed down to 16 kHz mono, as always. With `multichannel=true` (and `channels=2`:
 * interleaved PCM16) every channel is its own lane, `sess_ch<c>_<rest of the session id>`:
 * its own 16 kHz mono audio, its own VAD state (the VAD keeps one segmenter per lane, in
 * whichever partition the lane hashes to), its own items (their ids carry `ch<c>`) and its
 * own transcripts; the session (one socket, one admission, one set of close rules and one
 * usage meter in session.ts) sends every control to every lane, and forwards every lane's
 * events to the client with the lane's `channel`. `input_audio_buffer.commit` and `clear`
 * therefore act on every channel at once.
 */
export interface Lane {
  /** The id the VAD, the transcriber and rt.evt know the lane by. */
  id: string;
  /** Multichannel: the channel; undefined for a mixed-down session. */
  channel?: number;
}

export interface SessionAudio {
  readonly lanes: readonly Lane[];
  /** Channels billed per second of audio: each channel of a multichannel session, 1 otherwise. */
  readonly billedChannels: number;
  /** Whole frames of interleaved PCM16 at the client's rate. */
  push(samples: Int16Array): void;
  /**
   * A control after the audio so far. A graceful end (`end` with flush) first drains the
   * resampler: the last few milliseconds inside its filter (resample.ts) reach the VAD.
   */
  control(message: AudioControl): void;
  /** A resumed session: its next audio starts at this timeline sample (16 kHz; every lane). */
  resumeAt(offset: number): void;
  flush(): void;
  /** The connection is done with the lanes (closed or held): what is batched is published, the resamplers' WASM state freed. */
  release(): void;
  overloadedForMs(now: number): number;
  settled(): Promise<void>;
  readonly pendingAcks: number;
  readonly messagesPublished: number;
}

/** The lane id of channel `channel` of session `sessionId` (`sess_…`): still a session id, and its items' ids say the channel. */
function channelLaneId(sessionId: string, channel: number): string {
  return `sess_ch${channel}_${sessionId.slice(5)}`;
}

/** The lane ids of a session: its own id, or a multichannel session's one per channel. */
export function laneIdsOf(sessionId: string, multichannelChannels: number | undefined): string[] {
  return multichannelChannels === undefined ? [sessionId] : Array.from({ length: multichannelChannels }, (_, channel) => channelLaneId(sessionId, channel));
}

export interface SessionAudioOptions {
  sessionId: string;
  sampleRate: number;
  channels: number;
  multichannel: boolean;
  batcher: AudioBatcher;
  partitionOf(laneId: string): number;
  /** A resumed connection's first entry number (audio-publisher.ts). */
  firstSeq?: number;
  onFailure(err: unknown): void;
}

export function openSessionAudio(o: SessionAudioOptions): SessionAudio {
  const lanes: Lane[] = o.multichannel ? Array.from({ length: o.channels }, (_, channel) => ({ id: channelLaneId(o.sessionId, channel), channel })) : [{ id: o.sessionId }];
  const publishers: AudioPublisher[] = lanes.map((lane) => o.batcher.session({ sessionId: lane.id, partition: o.partitionOf(lane.id), firstSeq: o.firstSeq, onFailure: o.onFailure }));
  // a mixed-down session's resampler takes every channel; a lane's takes its own
  const resamplers: Resampler[] = lanes.map(() => createResampler(o.sampleRate, INTERNAL_SAMPLE_RATE, o.multichannel ? 1 : o.channels));
  return {
    lanes,
    billedChannels: o.multichannel ? o.channels : 1,
    push(samples) {
      lanes.forEach((lane, i) => {
        const own = lane.channel === undefined ? samples : pickChannel(samples, o.channels, lane.channel);
        publishers[i]!.pushAudio(resamplers[i]!.push(own));
      });
    },
    control(message) {
      if (message.kind === "end" && message.flush) publishers.forEach((p, i) => p.pushAudio(resamplers[i]!.flush()));
      publishers.forEach((p) => p.control(message));
    },
    resumeAt: (offset) => publishers.forEach((p) => p.resumeAt(offset)),
    flush: () => publishers.forEach((p) => p.flush()),
    release() {
      publishers.forEach((p) => p.flush());
      resamplers.forEach((r) => r.free());
    },
    overloadedForMs: (now) => Math.max(...publishers.map((p) => p.overloadedForMs(now))),
    settled: async () => {
      await Promise.all(publishers.map((p) => p.settled()));
    },
    get pendingAcks() {
      return publishers.reduce((n, p) => n + p.pendingAcks, 0);
    },
    get messagesPublished() {
      return publishers.reduce((n, p) => n + p.messagesPublished, 0);
    },
  };
}

/** A resumed connection's replay of every lane: `afterEventIds` one position per lane, in lane order (null: from the lane's start). */
export type LanesReplay = Omit<ReplayRequest, "afterEventId"> & { afterEventIds: readonly (string | null)[] };

/**
 * Every lane's events to the client (session-feed.ts per lane), each with its lane's
 * `channel` (a multichannel session's: every event a lane sends, so a client can keep
 * one resume position per channel); the session's progress is the lanes' together:
 * flushed when every lane's VAD has flushed, its pending items all of theirs.
 *
 * A resumed connection replays every lane after its own position. Each lane's VAD
 * answers the resume on its own: the session hears one answer once all have, the
 * smallest position (the lanes took the same audio, so they agree; a lane ahead drops
 * the overlap the client resends) and the largest floor, the replays counted together;
 * then every lane's replay is sent, then live events. The gateway's own events
 * (session.updated, session.resumed, errors about frames) take their ids from channel 0's
 * lane: they stand at channel 0's position (docs/realtime-resume.md).
 */
export function forwardLaneEvents(
  nats: Nats,
  lanes: readonly Lane[],
  send: (event: ServerEvent) => void,
  progressed: (progress: FeedProgress) => void,
  replay?: LanesReplay,
): SessionFeed {
  const laneReplays = replay && replayPerLane(replay, lanes.length);
  if (lanes.length === 1 && lanes[0]!.channel === undefined) return forwardSessionEvents(nats, lanes[0]!.id, send, progressed, laneReplays?.[0]);
  const progress = lanes.map((): FeedProgress => ({ vadFlushed: false, pendingItems: 0 }));
  const feeds = lanes.map((lane, i) =>
    forwardSessionEvents(
      nats,
      lane.id,
      (event) => send(onChannel(event, lane.channel!)),
      (p) => {
        progress[i] = p;
        progressed({ vadFlushed: progress.every((x) => x.vadFlushed), pendingItems: progress.reduce((n, x) => n + x.pendingItems, 0) });
      },
      laneReplays?.[i],
    ),
  );
  return { unsubscribe: () => feeds.forEach((f) => f.unsubscribe()), directEventId: () => feeds[0]!.directEventId() };
}

/** One ReplayRequest per lane whose answers are combined into the session's one `onResumed` (forwardLaneEvents). */
function replayPerLane(replay: LanesReplay, lanes: number): ReplayRequest[] {
  if (replay.afterEventIds.length !== lanes) throw new Error(`a replay needs one position per lane (${lanes}), got ${replay.afterEventIds.length}`);
  if (lanes === 1) return [{ ...replay, afterEventId: replay.afterEventIds[0]! }];
  const answers: Parameters<ReplayRequest["onResumed"]>[0][] = [];
  let failed = false;
  let release!: () => void;
  const all = new Promise<void>((resolve) => (release = resolve));
  return replay.afterEventIds.map((afterEventId) => ({
    ...replay,
    afterEventId,
    onResumed: (answer) => {
      answers.push(answer);
      if (answers.length === lanes && !failed) {
        replay.onResumed({
          position: Math.min(...answers.map((a) => a.position)),
          floorMs: Math.max(...answers.map((a) => a.floorMs)),
          replayed: answers.reduce((n, a) => n + a.replayed, 0),
        });
        release();
      }
      return all;
    },
    onFailed: (err) => {
      if (failed) return;
      failed = true;
      replay.onFailed(err);
    },
  }));
}

/** A lane's event as the client sees it: its channel on the event, and on each word of a completed item (as segment and batch words carry theirs). */
function onChannel(event: ServerEvent, channel: number): ServerEvent {
  if (event.type === "conversation.item.input_audio_transcription.completed") return { ...event, channel, words: event.words.map((w) => ({ ...w, channel })) };
  return { ...event, channel } as ServerEvent;
}
