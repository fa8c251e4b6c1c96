import { describe, expect, it } from "vitest";
import { AudioBatchWriter, decodeAudioBatch, encodeAudioBatch, encodedSize } from "./audio-batch";

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
  it("a writer extends a session's newest audio entry in place, past its first buffer, and starts a new entry after a control or another session", () => {
    const w = new AudioBatchWriter(8);
    w.add("sess_a", "audio", 0, 0, Uint8Array.from([1, 2]));
    expect(w.runBytes("sess_a")).toBe(2);
    expect(w.runBytes("sess_b")).toBe(-1);
    w.extend("sess_a", Uint8Array.from([3, 4, 5, 6]));
    w.add("sess_b", "audio", 0, 10, new Uint8Array(1000).fill(9));
    expect(w.runBytes("sess_a")).toBe(-1);
    expect(() => w.extend("sess_a", Uint8Array.from([7, 8]))).toThrow(/not this session's audio/);
    w.add("sess_a", "control", 1, 3, new TextEncoder().encode('{"kind":"commit"}'));
    expect(w.runBytes("sess_a")).toBe(-1);
    w.add("sess_a", "audio", 2, 3, Uint8Array.from([7, 8]));
    const bytes = w.finish();
    expect(w.entries).toBe(4);
    expect(bytes.byteLength).toBe(w.size);
    const back = decodeAudioBatch(bytes);
    expect(back.map((e) => [e.sessionId, e.kind, e.seq, e.offset, e.payload.byteLength])).toEqual([
      ["sess_a", "audio", 0, 0, 6],
      ["sess_b", "audio", 0, 10, 1000],
      ["sess_a", "control", 1, 3, 17],
      ["sess_a", "audio", 2, 3, 2],
    ]);
    expect([...back[0]!.payload]).toEqual([1, 2, 3, 4, 5, 6]);
    expect(back[1]!.payload.every((b) => b === 9)).toBe(true);
  });
  it("refuses foreign and truncated messages", () => {
    expect(() => decodeAudioBatch(new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]))).toThrow(/not an audio batch/);
    const bytes = encodeAudioBatch([{ sessionId: "s", kind: "audio", seq: 0, offset: 0, payload: new Uint8Array(10) }]);
    expect(() => decodeAudioBatch(bytes.subarray(0, bytes.length - 1))).toThrow(/truncated/);
  });
});
