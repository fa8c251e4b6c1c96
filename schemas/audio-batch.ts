/**
 * Audio batches on rt.audio.<partition>.<gateway instance> (docs/realtime.md, "Audio
 * path"): one JetStream message carries what every session of one gateway sent to one
 * VAD partition in the last batch interval, in order per session. A message per
 * session every 100 ms cost two error objects, a socket write and a header block per
 * publish; at 1,000 sessions that was 10,000 publishes a second, where batches are a
 * few hundred.
 *
 * Binary, little-endian: "RTB1", uint32 entry count, then per entry
 *   uint8 kind (0 audio: 16 kHz mono PCM16LE; 1 control: the JSON of an AudioControl)
 *   uint8 session id length, the id (ASCII)
 *   uint32 seq (per session, for tracing)
 *   float64 offset (the timeline position of the session's next sample, 16 kHz)
 *   uint32 payload length, the payload
 * The message carries header Rt-Kind: batch. Messages without it are single-session
 * messages with the AUDIO_HEADERS (the earlier format, still read).
 */
export const BATCH_KIND = "batch";
const MAGIC = 0x31425452; // "RTB1"

export interface AudioBatchEntry {
  sessionId: string;
  kind: "audio" | "control";
  seq: number;
  offset: number;
  payload: Uint8Array;
}

const HEAD = 8;
const ENTRY_FIXED = 1 + 1 + 4 + 8 + 4;

export function encodedSize(entries: readonly AudioBatchEntry[]): number {
  return entries.reduce((n, e) => n + ENTRY_FIXED + e.sessionId.length + e.payload.byteLength, HEAD);
}

export function encodeAudioBatch(entries: readonly AudioBatchEntry[]): Uint8Array {
  const out = new Uint8Array(encodedSize(entries));
  const view = new DataView(out.buffer);
  view.setUint32(0, MAGIC, true);
  view.setUint32(4, entries.length, true);
  let at = HEAD;
  for (const e of entries) {
    if (e.sessionId.length > 255) throw new RangeError("session id longer than 255 characters");
    view.setUint8(at, e.kind === "audio" ? 0 : 1);
    view.setUint8(at + 1, e.sessionId.length);
    at += 2;
    for (let i = 0; i < e.sessionId.length; i++) out[at + i] = e.sessionId.charCodeAt(i) & 0x7f;
    at += e.sessionId.length;
    view.setUint32(at, e.seq >>> 0, true);
    view.setFloat64(at + 4, e.offset, true);
    view.setUint32(at + 12, e.payload.byteLength, true);
    at += 16;
    out.set(e.payload, at);
    at += e.payload.byteLength;
  }
  return out;
}

/** The entries of a batch; throws on a truncated or foreign message. Payloads are views into `bytes`. */
export function decodeAudioBatch(bytes: Uint8Array): AudioBatchEntry[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.byteLength < HEAD || view.getUint32(0, true) !== MAGIC) throw new Error("not an audio batch");
  const count = view.getUint32(4, true);
  const out: AudioBatchEntry[] = [];
  let at = HEAD;
  for (let n = 0; n < count; n++) {
    if (at + 2 > bytes.byteLength) throw new Error("truncated audio batch");
    const kind = view.getUint8(at) === 0 ? "audio" : "control";
    const idLength = view.getUint8(at + 1);
    at += 2;
    if (at + idLength + 16 > bytes.byteLength) throw new Error("truncated audio batch");
    let sessionId = "";
    for (let i = 0; i < idLength; i++) sessionId += String.fromCharCode(bytes[at + i]!);
    at += idLength;
    const seq = view.getUint32(at, true);
    const offset = view.getFloat64(at + 4, true);
    const length = view.getUint32(at + 12, true);
    at += 16;
    if (at + length > bytes.byteLength) throw new Error("truncated audio batch");
    out.push({ sessionId, kind, seq, offset, payload: bytes.subarray(at, at + length) });
    at += length;
  }
  return out;
}
