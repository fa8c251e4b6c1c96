import type { ServerEvent, ServerEventOf } from "../../schemas/realtime";
import { appendEvents, type AppendResult, type NewEvent } from "../../shared/event-store";
import { safeJson } from "../../shared/json";
import type { Nats } from "../../shared/nats";
import { rtEventEnvelope, sessionOpened, type RtEvent, type SessionClosed, type SessionEventKey, type SessionOpened } from "./events";

/**
 * The sessions store: the only code that appends to rt.evt.<sessionId>. The gateway
 * records the lifecycle (opened, closed), the VAD its decisions (speech started and
 * stopped, committed, cleared, an empty commit's error, flushed) and the streamed
 * partials and finals, the rt-transcriber the commit path's outcomes (a transcript or a
 * failure); all of them through here.
 *
 * Event ids, one rule for the stream (the JetStream msg id, deduplicated within the
 * stream's window, and the envelope's `eventId`):
 *
 *     <sessionId>:<name>[:<key>]
 *
 * - name: the server event's `type` for `rt.server_event`; the lifecycle fact's last
 *   word (`opened`, `closed`, `flushed`) for the others;
 * - key (events.ts `SessionEventKey`): none for once-per-session facts, `<itemId>` for
 *   once-per-item events, `<itemId>:<at>` for partials, `control-<seq>` for the answer
 *   to a control, `<label>` for a speaker label's fold.
 *
 * Nothing in an id is random or read from a clock, and item ids come from the audio
 * timeline (decider.ts `itemId`), so the same fact written again (an audio batch
 * redelivered, a partition taken over, a command retried, the two paths of one item) is
 * stored once. Outside the window (2 min) a repeat would be stored again; the VAD's and
 * the transcriber's redeliveries happen well within it. The client-facing `event_id`
 * inside a server event is not the dedup id and may differ between two writes.
 */
export interface SessionStore {
  /** The gateway admitted the session (before any audio flows). */
  opened(data: SessionOpened): Promise<AppendResult>;
  /** The socket is gone: code, reason, audio and duration. */
  closed(data: SessionClosed): Promise<AppendResult>;
  /** The VAD decider's events for one input, in the order decided (decider.ts). */
  appendDecided(sessionId: string, events: KeyedEvent[]): Promise<AppendResult>;
  /** Streamed partials of an item: deltas keyed by the words out before them, interims by the samples fed. */
  appendPartials(sessionId: string, itemId: string, partials: { event: ServerEvent; at: number }[]): Promise<AppendResult>;
  /**
   * An item's outcome, at most one event of each type per item: its last delta and
   * `completed` (streamed final or commit path; both write the same ids, so if both
   * ever ran the stream keeps one), or `failed`.
   */
  appendOutcome(sessionId: string, itemId: string, events: ServerEvent[]): Promise<AppendResult>;
  /** Speaker labels folded into earlier ones (`conversation.speaker.merged`), keyed by the folded label: each is stored once, whichever item's labelling is repeated. */
  appendSpeakerMerges(sessionId: string, events: ServerEventOf<"conversation.speaker.merged">[]): Promise<AppendResult>;
  /** The session's `rt.session.opened`, if it is among the first few records of its subject. */
  readOpened(sessionId: string): Promise<SessionOpened | undefined>;
}

/** A record with what makes it unique in its session. */
export interface KeyedEvent {
  event: RtEvent;
  key: SessionEventKey;
}

/** The event id of a record (the rule above). */
export function sessionEventId(sessionId: string, event: RtEvent, key: SessionEventKey): string {
  const name = nameOf(event);
  switch (key.kind) {
    case "session":
      return `${sessionId}:${name}`;
    case "item":
      return `${sessionId}:${name}:${key.item}`;
    case "partial":
      return `${sessionId}:${name}:${key.item}:${key.at}`;
    case "control":
      return `${sessionId}:${name}:control-${key.seq}`;
    case "speaker":
      return `${sessionId}:${name}:${key.speaker}`;
    default: {
      const never: never = key;
      return never;
    }
  }
}

function nameOf(event: RtEvent): string {
  switch (event.type) {
    case "rt.server_event":
      return event.data.type;
    case "rt.session.opened":
      return "opened";
    case "rt.session.closed":
      return "closed";
    case "rt.session.flushed":
      return "flushed";
    case "rt.session.resumed":
      return "resumed";
    default: {
      const never: never = event;
      return never;
    }
  }
}

/** The VAD pipelines its appends behind a partition's ack: a slow stream gets longer than the default 5 s. */
const VAD_APPEND_TIMEOUT_MS = 10_000;
/** `opened` is the first or among the first few records of a subject (the gateway appends it before audio flows). */
const OPENED_SCAN = 5;

export function createSessionStore(nats: Pick<Nats, "js" | "jsm" | "topology">): SessionStore {
  const subject = nats.topology.subjects.rtEvent;
  const stream = nats.topology.streams.rtEvents.name;
  const append = (sessionId: string, events: KeyedEvent[], timeoutMs?: number) =>
    appendEvents(
      nats.js,
      rtEventEnvelope,
      subject(sessionId),
      events.map(({ event, key }): NewEvent<RtEvent> => ({ type: event.type, data: event.data, msgId: sessionEventId(sessionId, event, key), metadata: { correlationId: sessionId } })),
      timeoutMs === undefined ? {} : { timeoutMs },
    );
  const server = (data: ServerEvent): RtEvent => ({ type: "rt.server_event", data });
  return {
    opened: (data) => append(data.session_id, [{ event: { type: "rt.session.opened", data }, key: { kind: "session" } }]),
    closed: (data) => append(data.session_id, [{ event: { type: "rt.session.closed", data }, key: { kind: "session" } }]),
    appendDecided: (sessionId, events) => append(sessionId, events, VAD_APPEND_TIMEOUT_MS),
    appendPartials: (sessionId, itemId, partials) =>
      append(
        sessionId,
        partials.map(({ event, at }) => ({ event: server(event), key: { kind: "partial", item: itemId, at } })),
        VAD_APPEND_TIMEOUT_MS,
      ),
    appendOutcome: (sessionId, itemId, events) => append(sessionId, events.map((e) => ({ event: server(e), key: { kind: "item", item: itemId } }))),
    appendSpeakerMerges: (sessionId, events) => append(sessionId, events.map((e) => ({ event: server(e), key: { kind: "speaker", speaker: e.from } })), VAD_APPEND_TIMEOUT_MS),
    async readOpened(sessionId) {
      let seq = 0;
      for (let i = 0; i < OPENED_SCAN; i++) {
        const m = await nats.jsm.direct.getMessage(stream, { seq: seq + 1, next_by_subj: subject(sessionId) });
        if (!m) return undefined;
        // a record that is not JSON is stepped over like one that is not `opened`
        const parsed = sessionOpened.safeParse(safeJson(m.string()));
        if (parsed.success) return parsed.data.data;
        seq = m.seq;
      }
      return undefined;
    },
  };
}
