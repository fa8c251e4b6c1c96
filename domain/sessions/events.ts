import { z } from "zod";
import { envelopeOf } from "../../schemas/envelope";
import { serverEvent, type ServerEvent } from "../../schemas/realtime";

/**
 * The realtime session's records on rt.evt.<sessionId>. `rt.server_event` carries a
 * server event exactly as the gateway forwards it to the socket (its wire shape is
 * schemas/realtime.ts); the lifecycle facts (opened, closed, flushed) are not forwarded.
 * Every record is appended by the sessions store (store.ts), nowhere else.
 */
export const sessionOpened = z.object({
  type: z.literal("rt.session.opened"),
  data: z.object({
    session_id: z.string(),
    request_id: z.string(),
    key_id: z.string(),
    owner_id: z.string(),
    plan: z.string(),
    gateway_id: z.string(),
    sample_rate: z.number().int(),
    channels: z.number().int(),
  }),
});
const sessionClosed = z.object({
  type: z.literal("rt.session.closed"),
  data: z.object({
    session_id: z.string(),
    code: z.number().int(),
    reason: z.string(),
    audio_ms: z.number().int().nonnegative(),
    duration_ms: z.number().int().nonnegative(),
  }),
});

/** The VAD has handled a graceful end: every utterance of the session is committed. */
const sessionFlushed = z.object({
  type: z.literal("rt.session.flushed"),
  data: z.object({ session_id: z.string() }),
});
/**
 * The VAD has handled a resume control: every audio entry before it is decided, and the
 * next audio of the session starts at `position` (timeline samples, 16 kHz).
 */
const sessionResumed = z.object({
  type: z.literal("rt.session.resumed"),
  data: z.object({ session_id: z.string(), gen: z.number().int().positive(), position: z.number().int().nonnegative() }),
});
const serverEventRecorded = z.object({ type: z.literal("rt.server_event"), data: serverEvent });

const rtEvent = z.discriminatedUnion("type", [sessionOpened, sessionClosed, sessionFlushed, sessionResumed, serverEventRecorded]);
export type RtEvent = z.infer<typeof rtEvent>;
export type SessionOpened = z.infer<typeof sessionOpened>["data"];
export type SessionClosed = z.infer<typeof sessionClosed>["data"];
export const rtEventEnvelope = envelopeOf(rtEvent);

/**
 * What makes a record unique within its session, the part of its event id after the
 * name (store.ts `sessionEventId`):
 * - `session`: once per session (opened, closed, flushed);
 * - `item`: once per item and type (speech started/stopped, committed, an item's last
 *   delta, completed, failed);
 * - `partial`: many per item, told apart by `at` (a delta: the words out before it; an
 *   interim: the samples fed when it was read);
 * - `control`: the answer to a control message, by the control's place (`seq`) in the
 *   session's audio stream (cleared, the error of an empty commit, resumed);
 * - `speaker`: once per speaker label (a label folded into another: `from`).
 */
export type SessionEventKey =
  | { kind: "session" }
  | { kind: "item"; item: string }
  | { kind: "partial"; item: string; at: number }
  | { kind: "control"; seq: number }
  | { kind: "speaker"; speaker: string };

/** The server event a stored rt event carries, or null for lifecycle facts. */
export function toServerEvent(event: RtEvent): ServerEvent | null {
  return event.type === "rt.server_event" ? event.data : null;
}
