import { describe, expect, it } from "vitest";
import { defaultTurnDetection } from "../../schemas/realtime";
import { defaultDoorConfig } from "./openai-config";
import { DOOR_START, doorEventId, doorPosition, restoredDoor, storedEventIdOf } from "./openai-resume";

const stored = "evt_0123456789abcdef01234567";

describe("the OpenAI door's event ids and resume positions", () => {
  it("a translated event's id names its native event and index; a direct one the position before it, never twice", () => {
    expect(doorEventId({ eventId: stored, index: 2 }, false)).toBe(`event_${stored}_2`);
    const direct = doorEventId({ eventId: stored, index: 2 }, true);
    expect(direct).toMatch(new RegExp(`^event_${stored}_2\\.[0-9a-f]{12}$`));
    expect(doorEventId({ eventId: stored, index: 2 }, true)).not.toBe(direct);
    expect(doorEventId(DOOR_START, true)).toMatch(/^event_evt_0_0\.[0-9a-f]{12}$/);
  });

  it("last_event_id → position: a door id (translated or direct) is read back; absent or before any stored event is the start", () => {
    expect(doorPosition(`event_${stored}_1`)).toEqual({ eventId: stored, index: 1 });
    expect(doorPosition(doorEventId({ eventId: stored, index: 0 }, true))).toEqual({ eventId: stored, index: 0 });
    expect(doorPosition(null)).toEqual(DOOR_START);
    expect(doorPosition("")).toEqual(DOOR_START);
    expect(doorPosition(doorEventId(DOOR_START, true))).toEqual(DOOR_START);
  });

  it("anything else is 400 resume_event_unknown (a native id, garbage, a random OpenAI-style id)", () => {
    for (const id of [stored, "garbage", "event_AbC123xyz", `event_${stored}`, `event_${stored}_x`, `event_${stored}_1.zz`]) {
      expect(() => doorPosition(id), id).toThrow(expect.objectContaining({ status: 400, code: "resume_event_unknown" }));
    }
  });

  it("only stored native events (evt_ and 24 hex) give translated ids", () => {
    expect(storedEventIdOf({ event_id: stored })).toBe(stored);
    expect(storedEventIdOf({ event_id: `${stored}.3` })).toBeNull();
    expect(storedEventIdOf({})).toBeNull();
  });
});

describe("the door state a resume restores", () => {
  const record = { config: defaultDoorConfig(defaultTurnDetection, "m", null), beta: true, expiresAt: 1_900_000_000 };

  it("a door session through the door: its stored state; a native session through the native path: none", () => {
    expect(restoredDoor(JSON.parse(JSON.stringify(record)), "openai")).toEqual(record);
    expect(restoredDoor(undefined, "native")).toBeUndefined();
  });

  it("a session resumes only through the door it was opened on: 409 resume_wrong_door", () => {
    expect(() => restoredDoor(record, "native")).toThrow(expect.objectContaining({ status: 409, code: "resume_wrong_door" }));
    expect(() => restoredDoor(undefined, "openai")).toThrow(expect.objectContaining({ status: 409, code: "resume_wrong_door" }));
  });

  it("garbage in the stored state reads as lost: 410 resume_state_lost", () => {
    for (const garbage of [null, "x", { config: {} }, { ...record, config: { ...record.config, format: "mp3" } }]) {
      expect(() => restoredDoor(garbage, "openai")).toThrow(expect.objectContaining({ status: 410, code: "resume_state_lost" }));
    }
  });
});
