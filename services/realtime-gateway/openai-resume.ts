import { randomBytes } from "node:crypto";
import { validationError } from "../../shared/errors";

export { restoredDoor } from "../../domain/sessions/resume";

/**
 * Resuming a session opened on the OpenAI door (docs/realtime-resume.md,
 * "Through the OpenAI door"): the door's event ids, the replay position a client's
 * `last_event_id` names, and the door state a resume restores.
 *
 * Door event ids name a position in the session's native event stream, so they are the
 * same live, replayed and on any gateway:
 * - `event_<evt>_<k>`: the k-th OpenAI event translated from the stored native event
 *   `<evt>` (its stable id, session-feed.ts): one native `committed` becomes three
 *   OpenAI events (`_0`, `_1`, `_2`);
 * - `event_<evt>_<k>.<hex>`: an event no stored event stands for (`session.created`,
 *   `session.updated`, errors, `session.resumed`): the position of the last translated
 *   event sent before it and a random suffix (ids never repeat); `event_evt_0_0.<hex>`
 *   before any.
 * A resume from `event_<evt>_<k>` replays the stored events from `<evt>` on, without the
 * OpenAI events of `<evt>` up to `k` (the client has them).
 */
export interface DoorPosition {
  /** The stable id of the native event; null: the session's start. */
  eventId: string | null;
  /** The door events of `eventId` the client has: index 0 up to this one. */
  index: number;
}

export const DOOR_START: DoorPosition = { eventId: null, index: 0 };

const DOOR_EVENT_ID = /^event_(evt_(?:0|[0-9a-f]{24}))_(\d{1,4})(?:\.[0-9a-f]{1,32})?$/;
const STORED_EVENT_ID = /^evt_[0-9a-f]{24}$/;

/** The stable id of a stored native event (session-feed.ts stableEventId), or null for an event the gateway sent itself. */
export function storedEventIdOf(event: { event_id?: string }): string | null {
  return event.event_id !== undefined && STORED_EVENT_ID.test(event.event_id) ? event.event_id : null;
}

/** A door event's id: the k-th of a stored event (`at`), or (`direct`) one sent at position `at` that no stored event stands for. */
export function doorEventId(at: DoorPosition, direct: boolean): string {
  const id = `event_${at.eventId ?? "evt_0"}_${at.index}`;
  return direct ? `${id}.${randomBytes(6).toString("hex")}` : id;
}

/** The position a door client's `last_event_id` names (absent: the start); 400 resume_event_unknown for anything that is not a door event id. */
export function doorPosition(lastEventId: string | null): DoorPosition {
  if (lastEventId === null || lastEventId === "") return DOOR_START;
  const m = DOOR_EVENT_ID.exec(lastEventId);
  if (!m) throw validationError("resume_event_unknown", "last_event_id is not an event id of this door (event_evt_…).", { param: "last_event_id" });
  return m[1] === "evt_0" ? DOOR_START : { eventId: m[1]!, index: Number(m[2]) };
}
