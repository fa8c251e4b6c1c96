import { describe, expect, it } from "vitest";
import { segmentEventId, segmentFailed, segmentTranscribed, type SegmentRequest } from "./events";

const request: SegmentRequest = { requestId: "seg_1", keyId: "key_1", ownerId: "owner", model: "stt-1", audioSeconds: 2.92549, bytes: 93_644, responseFormat: "json" };

describe("segment audit events", () => {
  it("a transcribed request: the request's facts, the worker's, times to 0.1 ms, audio seconds to 1 ms", () => {
    expect(segmentTranscribed(request, { workerId: "pocketsphinx-a", fallbackUsed: false, workerMs: 812.345, totalMs: 901.06, textChars: 52 })).toEqual({
      type: "SegmentTranscribed",
      data: { requestId: "seg_1", keyId: "key_1", ownerId: "owner", model: "stt-1", audioSeconds: 2.925, bytes: 93_644, responseFormat: "json", workerId: "pocketsphinx-a", fallbackUsed: false, workerMs: 812.3, totalMs: 901.1, textChars: 52 },
    });
  });

  it("a failed request: its code and a message of at most 500 characters", () => {
    const e = segmentFailed(request, { code: "audio_too_long", message: "x".repeat(600), totalMs: 3.04 });
    expect(e).toMatchObject({ type: "SegmentFailed", data: { requestId: "seg_1", code: "audio_too_long", totalMs: 3 } });
    expect(e.type === "SegmentFailed" && e.data.message).toHaveLength(500);
  });

  it("ids come from the request: the same outcome always has the same id, the two outcomes differ", () => {
    const done = segmentTranscribed(request, { workerId: "w", fallbackUsed: true, workerMs: 1, totalMs: 2, textChars: 0 });
    const again = segmentTranscribed({ ...request, audioSeconds: 3 }, { workerId: "w2", fallbackUsed: false, workerMs: 5, totalMs: 9, textChars: 1 });
    const failed = segmentFailed(request, { code: "transcription_failed", message: "", totalMs: 2 });
    expect(segmentEventId(done)).toBe("seg_1:SegmentTranscribed");
    expect(segmentEventId(again)).toBe(segmentEventId(done));
    expect(segmentEventId(failed)).toBe("seg_1:SegmentFailed");
  });
});
