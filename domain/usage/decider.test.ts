import { describe, expect, it } from "vitest";
import { decideUsage, usageId, type DecidedUsage } from "./decider";
import type { UsageCommand } from "./events";

const when = (command: UsageCommand) => ({ then: (expected: DecidedUsage[]) => expect(decideUsage(command)).toEqual(expected) });

const record = (over: Partial<UsageCommand["data"]> = {}): UsageCommand => ({
  type: "RecordUsage",
  data: { keyId: "key_1", ownerId: "acme", plane: "segment", audioSeconds: 11.0005, requests: 1, subjectId: "seg_1", at: "2026-01-01T00:00:00.000Z", ...over },
});

describe("usage decider", () => {
  it("records a subject's usage once, under its usage id, audio to the millisecond", () =>
    when(record()).then([
      {
        eventId: "seg_1:usage",
        event: {
          type: "UsageRecorded",
          data: { keyId: "key_1", ownerId: "acme", plane: "segment", audioSeconds: 11.001, requests: 1, subjectId: "seg_1", occurredAt: "2026-01-01T00:00:00.000Z" },
        },
      },
    ]));

  it("a subject recorded in parts gets one id per part", () => {
    const [first] = decideUsage(record({ plane: "realtime", subjectId: "sess_1", part: 0, audioSeconds: 30 }));
    const [second] = decideUsage(record({ plane: "realtime", subjectId: "sess_1", part: 1, audioSeconds: 4.25, requests: 0 }));
    expect([first!.eventId, second!.eventId]).toEqual(["sess_1:usage:0", "sess_1:usage:1"]);
    expect(second!.event.data).toMatchObject({ audioSeconds: 4.25, requests: 0, plane: "realtime" });
  });

  it("usage ids: `<subject>:usage`, `<subject>:usage:<part>`", () => {
    expect(usageId("wf_1")).toBe("wf_1:usage");
    expect(usageId("sess_1", 0)).toBe("sess_1:usage:0");
    expect(usageId("sess_1", 12)).toBe("sess_1:usage:12");
  });
});
