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
/** Gateways start a new batch before one would pass this; the VAD sizes its pulls by it. */
export const MAX_BATCH_MESSAGE_BYTES = 256 * 1024;
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

/** Bytes one entry takes in a batch. */
export function entrySize(sessionId: string, payloadBytes: number): number {
  return ENTRY_FIXED + sessionId.length + payloadBytes;
}

export function encodedSize(entries: readonly AudioBatchEntry[]): number {
  return entries.reduce((n, e) => n + entrySize(e.sessionId, e.payload.byteLength), HEAD);
}

export function encodeAudioBatch(entries: readonly AudioBatchEntry[]): Uint8Array {
  const w = new AudioBatchWriter(encodedSize(entries));
  for (const e of entries) w.add(e.sessionId, e.kind, e.seq, e.offset, e.payload);
  return w.finish();
}

/**
 * Writes a batch entry by entry into one growing buffer, so a gateway copies each frame
 * once, straight into the batch it goes out in (no array per frame or per run, no
 * second copy when the batch is encoded).
 */
export class AudioBatchWriter {
  private buf: Uint8Array;
  private view: DataView;
  private at = HEAD;
  private count = 0;
  /** Where the newest entry's payload length is written, and whose audio it is (null: a control). */
  private lastLengthAt = -1;
  private lastAudioOf: string | null = null;

  /** A capacity, or a buffer to write into (reused: what it held is overwritten). */
  constructor(capacity: number | Uint8Array = 16 * 1024) {
    this.buf = typeof capacity === "number" || capacity.byteLength < HEAD ? new Uint8Array(Math.max(HEAD, typeof capacity === "number" ? capacity : HEAD)) : capacity;
    this.view = new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
  }

  /** The buffer written into (for reuse once the batch is no longer needed). */
  get buffer(): Uint8Array {
    return this.buf;
  }

  /** Bytes written so far (the header included). */
  get size(): number {
    return this.at;
  }

  get entries(): number {
    return this.count;
  }

  add(sessionId: string, kind: "audio" | "control", seq: number, offset: number, payload: Uint8Array): void {
    if (sessionId.length > 255) throw new RangeError("session id longer than 255 characters");
    this.reserve(entrySize(sessionId, payload.byteLength));
    const { buf, view } = this;
    let at = this.at;
    view.setUint8(at, kind === "audio" ? 0 : 1);
    view.setUint8(at + 1, sessionId.length);
    at += 2;
    for (let i = 0; i < sessionId.length; i++) buf[at + i] = sessionId.charCodeAt(i) & 0x7f;
    at += sessionId.length;
    view.setUint32(at, seq >>> 0, true);
    view.setFloat64(at + 4, offset, true);
    view.setUint32(at + 12, payload.byteLength, true);
    this.lastLengthAt = at + 12;
    at += 16;
    buf.set(payload, at);
    this.at = at + payload.byteLength;
    this.count++;
    this.lastAudioOf = kind === "audio" ? sessionId : null;
  }

  /** Payload bytes of the newest entry when it is `sessionId`'s audio, else -1. */
  runBytes(sessionId: string): number {
    return this.lastAudioOf === sessionId ? this.view.getUint32(this.lastLengthAt, true) : -1;
  }

  /** Appends audio to the newest entry, which must be `sessionId`'s audio (runBytes ≥ 0). */
  extend(sessionId: string, payload: Uint8Array): void {
    if (this.lastAudioOf !== sessionId) throw new Error("the newest entry is not this session's audio");
    this.reserve(payload.byteLength);
    this.buf.set(payload, this.at);
    this.at += payload.byteLength;
    this.view.setUint32(this.lastLengthAt, this.view.getUint32(this.lastLengthAt, true) + payload.byteLength, true);
  }

  /** The batch: a view of the writer's buffer (the writer is not written to again). */
  finish(): Uint8Array {
    this.view.setUint32(0, MAGIC, true);
    this.view.setUint32(4, this.count, true);
    return this.buf.subarray(0, this.at);
  }

  private reserve(n: number) {
    if (this.at + n <= this.buf.length) return;
    const next = new Uint8Array(Math.max(this.at + n, this.buf.length * 2));
    next.set(this.buf.subarray(0, this.at));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }
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
    // one flat string (a character at a time built a rope that every Map lookup of the
    // session flattened again)
    const sessionId = String.fromCharCode.apply(null, bytes.subarray(at, at + idLength) as unknown as number[]);
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
