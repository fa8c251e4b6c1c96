import { describe, expect, it } from "vitest";
import { decodeAudioBatch, encodeAudioBatch, encodedSize } from "./audio-batch";

describe("audio batches", () => {
  it("round-trip entries of several sessions in order, payloads intact", () => {
    const entries = [
      { sessionId: "sess_a", kind: "control" as const, seq: 0, offset: 0, payload: new TextEncoder().encode('{"kind":"start"}') },
      { sessionId: "sess_a", kind: "audio" as const, seq: 1, offset: 0, payload: Uint8Array.from([1, 2, 3, 4]) },
      { sessionId: "sess_b", kind: "audio" as const, seq: 7, offset: 123_456_789, payload: new Uint8Array(0) },
    ];
    const bytes = encodeAudioBatch(entries);
    expect(bytes.byteLength).toBe(encodedSize(entries));
    const back = decodeAudioBatch(bytes);
    expect(back.map((e) => ({ ...e, payload: [...e.payload] }))).toEqual(entries.map((e) => ({ ...e, payload: [...e.payload] })));
  });
  it("refuses foreign and truncated messages", () => {
    expect(() => decodeAudioBatch(new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]))).toThrow(/not an audio batch/);
    const bytes = encodeAudioBatch([{ sessionId: "s", kind: "audio", seq: 0, offset: 0, payload: new Uint8Array(10) }]);
    expect(() => decodeAudioBatch(bytes.subarray(0, bytes.length - 1))).toThrow(/truncated/);
  });
});
