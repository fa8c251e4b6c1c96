import { createHash } from "node:crypto";
import type { Msg } from "@nats-io/transport-node";
import type { ServerEvent } from "../../schemas/realtime";
import { rtEventEnvelope, toServerEvent, type RtEvent } from "../../domain/sessions/events";
import type { Nats } from "../../shared/nats";
import { withSpanFromHeaders } from "../../shared/telemetry";
import { readSessionRecords } from "./session-records";

const SEEN_EVENT_IDS = 1024;
const DIRECT_IDS_PER_CONNECTION = 1_000_000;

/** Where a graceful close stands: the VAD has committed everything, and how many committed items still wait for their result. */
export interface FeedProgress {
  vadFlushed: boolean;
  pendingItems: number;
}

/**
 * The client-facing id of a stored event: `evt_` and 24 hex of its store id's SHA-256
 * (the store id is deterministic, domain/sessions/store.ts), so an event has the same
 * id live, replayed, and on any gateway. A resume names its position with it.
 */
export function stableEventId(storeId: string): string {
  return `evt_${createHash("sha256").update(storeId).digest("hex").slice(0, 24)}`;
}

/** A resumed connection's replay: the stored events after `afterEventId` (stable id; null: all), up to the VAD's answer to resume `gen`. */
export interface ReplayRequest {
  gen: number;
  afterEventId: string | null;
  /** How long to wait for the VAD's rt.session.resumed. */
  waitMs: number;
  /**
   * The VAD answered: called before the replayed events are sent (the caller sends
   * session.resumed). `floorMs`: the latest audio time any stored event names, under
   * which the timeline cannot be (a VAD restarted meanwhile answers from 0). A promise
   * holds the replay back until it settles (a multichannel session's lanes wait for
   * each other: session-channels.ts); the live events wait for every replay so held.
   */
  onResumed(result: { position: number; floorMs: number; replayed: number }): void | Promise<void>;
  onFailed(err: Error): void;
  /**
   * The stored events up to and including `afterEventId`, which the client has (or had
   * partly: the OpenAI door sends one event as several), handed over before `onResumed`
   * and not sent: the door rebuilds its state from them.
   */
  prior?(event: ServerEvent): void;
}

export interface SessionFeed {
  unsubscribe(): void;
  /**
   * An id for an event the gateway sends itself (session.updated, an error about a
   * frame, session.resumed): the stable id of the last stored event forwarded before it
   * plus a suffix, so a resume from it starts at the right place
   * (domain/sessions/resume.ts replayPosition); a resumed connection's suffixes start at
   * gen × 1,000,000, so no two connections of a session repeat one.
   */
  directEventId(): string;
}

/**
 * Session events from the VAD and the transcriber, forwarded to the client as they
 * arrive: a core NATS subscription on rt.evt.<sessionId> (JetStream publishes reach
 * core subscribers too). A core subscriber sees every publish, also those JetStream
 * drops as duplicates (a retried transcription, audio handled again after a VAD
 * takeover): the store ids seen recently are remembered, so the client gets each event
 * once. `progressed` is called after each forwarded event and at `rt.session.flushed`.
 *
 * With `replay` (a resumed connection) live messages are held back while the stored
 * ones are read from the stream; the stored events after the client's position are
 * sent, then the held live ones not among them, then the feed is live. The
 * subscription is made before the read, so nothing falls between the two.
 */
export function forwardSessionEvents(
  nats: Nats,
  sessionId: string,
  send: (event: ServerEvent) => void,
  progressed: (progress: FeedProgress) => void,
  replay?: ReplayRequest,
): SessionFeed {
  const seen = new Set<string>();
  const pendingItems = new Set<string>();
  let vadFlushed = false;
  let lastStable: string | null = null;
  /** Numbered apart per connection of the session (its resume generation), so two connections' own events never share an id. */
  let direct = replay ? replay.gen * DIRECT_IDS_PER_CONNECTION : 0;
  let stopped = false;
  /** Live messages held back during a replay (null: live). */
  let held: Msg[] | null = replay ? [] : null;
  const progress = () => progressed({ vadFlushed, pendingItems: pendingItems.size });

  /** One stored record: deduplicated, tracked, and (unless `quiet`) sent. Returns the event sent, if any. */
  const take = (recorded: RtEvent & { metadata: { eventId: string } }, headers: Msg["headers"] | undefined, quiet: boolean): ServerEvent | null => {
    const storeId = recorded.metadata.eventId;
    if (seen.has(storeId)) return null;
    seen.add(storeId);
    if (seen.size > SEEN_EVENT_IDS) seen.delete(seen.values().next().value!);
    if (recorded.type === "rt.session.flushed") {
      vadFlushed = true;
      if (!quiet) progress();
      return null;
    }
    const stored = toServerEvent(recorded);
    if (!stored) return null;
    lastStable = stableEventId(storeId);
    const event = { ...stored, event_id: lastStable } as ServerEvent;
    if (event.type === "input_audio_buffer.committed") pendingItems.add(event.item_id);
    const outcome = event.type === "conversation.item.input_audio_transcription.completed" || event.type === "conversation.item.input_audio_transcription.failed";
    if (outcome) pendingItems.delete(event.item_id);
    if (quiet) return event;
    if (outcome) {
      // the utterance's last hop: its transcript to the socket, in the utterance's trace
      void withSpanFromHeaders("ws send transcript", headers, async (span) => {
        span.setAttributes({ "session.id": sessionId, "item.id": event.item_id, "event.type": event.type });
        send(event);
      });
    } else send(event);
    progress();
    return event;
  };

  const live = (msg: Msg) => {
    let recorded;
    try {
      recorded = rtEventEnvelope.parse(msg.json());
    } catch {
      return;
    }
    take(recorded, msg.headers, false);
  };

  const subscription = nats.nc.subscribe(nats.topology.subjects.rtEvent(sessionId), {
    callback: (err, msg) => {
      if (err || stopped) return;
      if (held) held.push(msg);
      else live(msg);
    },
  });

  if (replay) {
    const replayed: ServerEvent[] = [];
    const before: ServerEvent[] = [];
    const all: ServerEvent[] = [];
    let found = replay.afterEventId === null;
    let position: number | null = null;
    let floorMs = 0;
    void readSessionRecords(
      nats,
      sessionId,
      (recorded) => {
        if (recorded.type === "rt.session.resumed" && recorded.data.gen === replay.gen) {
          position = recorded.data.position;
          return true;
        }
        const event = take(recorded, undefined, true);
        if (!event) return false;
        all.push(event);
        if ("audio_end_ms" in event) floorMs = Math.max(floorMs, event.audio_end_ms);
        else if ("audio_start_ms" in event) floorMs = Math.max(floorMs, event.audio_start_ms);
        if (found) replayed.push(event);
        else {
          before.push(event);
          if (lastStable === replay.afterEventId) found = true;
        }
        return false;
      },
      { waitMs: replay.waitMs },
    ).then(
      () => {
        if (stopped) return;
        if (position === null) return replay.onFailed(new Error("the voice activity detector did not answer the resume"));
        // found is checked before the upgrade (resume.ts); should it be missing now, everything is replayed
        const out = found ? replayed : all;
        if (found) for (const e of before) replay.prior?.(e);
        // the events the gateway sends before the replay (session.resumed) stand where the client stood, not after the replay
        const readUpTo = lastStable;
        lastStable = found ? replay.afterEventId : null;
        const sendReplayed = () => {
          lastStable = readUpTo;
          if (!stopped) for (const e of out) send(e);
        };
        const goLive = () => {
          if (stopped) return;
          const backlog = held ?? [];
          held = null;
          for (const m of backlog) live(m);
          progress();
        };
        const waited = replay.onResumed({ position, floorMs, replayed: out.length });
        if (!waited) return void (sendReplayed(), goLive());
        // two steps: every lane waiting on the same promise sends its replay before any goes live
        void waited.then(sendReplayed).then(goLive, () => undefined);
      },
      (err: Error) => {
        if (!stopped) replay.onFailed(err);
      },
    );
  }

  return {
    unsubscribe() {
      stopped = true;
      held = null;
      subscription.unsubscribe();
    },
    directEventId: () => `${lastStable ?? "evt_0"}.${++direct}`,
  };
}
