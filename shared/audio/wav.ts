/**
 * WAV (RIFF) helpers for 16-bit PCM: encode a clip for an HTTP worker, and parse the
 * common case (PCM16 mono 16 kHz) without spawning ffmpeg. Anything else goes through
 * decodeAudio (shared/audio/decode.ts).
 */
export const TARGET_SAMPLE_RATE = 16_000;

/** Encodes mono PCM16 samples as a canonical 44-byte-header WAV file. */
export function encodeWav(pcm: Int16Array, sampleRate = TARGET_SAMPLE_RATE): Buffer {
  const [header, data] = wavParts(pcm, sampleRate);
  return Buffer.concat([header, data]);
}

/**
 * A mono PCM16 WAV as its 44-byte header and a view of `pcm` (no copy): for senders
 * that write the parts one after another, so a long clip is not copied to be sent.
 */
export function wavParts(pcm: Int16Array, sampleRate = TARGET_SAMPLE_RATE): [Buffer, Buffer] {
  const dataBytes = pcm.length * 2;
  const out = Buffer.alloc(44);
  out.write("RIFF", 0, "ascii");
  out.writeUInt32LE(36 + dataBytes, 4);
  out.write("WAVE", 8, "ascii");
  out.write("fmt ", 12, "ascii");
  out.writeUInt32LE(16, 16);
  out.writeUInt16LE(1, 20); // PCM
  out.writeUInt16LE(1, 22); // mono
  out.writeUInt32LE(sampleRate, 24);
  out.writeUInt32LE(sampleRate * 2, 28);
  out.writeUInt16LE(2, 32);
  out.writeUInt16LE(16, 34);
  out.write("data", 36, "ascii");
  out.writeUInt32LE(dataBytes, 40);
  return [out, Buffer.from(pcm.buffer, pcm.byteOffset, dataBytes)];
}

export interface ParsedWav {
  sampleRate: number;
  channels: number;
  bitsPerSample: number;
  /** 1 = integer PCM, 3 = IEEE float, 0xfffe = extensible. */
  format: number;
  /** Raw bytes of the data chunk. */
  data: Buffer;
}

/** Parses a RIFF/WAVE header; returns undefined for anything that is not a WAV. */
export function parseWav(bytes: Uint8Array): ParsedWav | undefined {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (buf.length < 12 || buf.toString("ascii", 0, 4) !== "RIFF" || buf.toString("ascii", 8, 12) !== "WAVE") {
    return undefined;
  }
  let offset = 12;
  let fmt: Omit<ParsedWav, "data"> | undefined;
  while (offset + 8 <= buf.length) {
    const id = buf.toString("ascii", offset, offset + 4);
    const size = buf.readUInt32LE(offset + 4);
    const body = offset + 8;
    if (id === "fmt " && body + 16 <= buf.length) {
      fmt = {
        format: buf.readUInt16LE(body),
        channels: buf.readUInt16LE(body + 2),
        sampleRate: buf.readUInt32LE(body + 4),
        bitsPerSample: buf.readUInt16LE(body + 14),
      };
    } else if (id === "data" && fmt) {
      // Streaming writers put 0 or 0xffffffff here: take what is there.
      const end = size === 0 || size === 0xffffffff ? buf.length : Math.min(buf.length, body + size);
      return { ...fmt, data: buf.subarray(body, end) };
    }
    offset = body + size + (size % 2);
  }
  return undefined;
}

/**
 * The samples of a WAV that is already what every worker wants (PCM16 mono 16 kHz),
 * copied into an aligned Int16Array; undefined for any other input.
 */
export function pcm16MonoFromWav(bytes: Uint8Array): Int16Array | undefined {
  const wav = parseWav(bytes);
  if (!wav || wav.format !== 1 || wav.channels !== 1 || wav.bitsPerSample !== 16) return undefined;
  if (wav.sampleRate !== TARGET_SAMPLE_RATE) return undefined;
  const n = Math.floor(wav.data.length / 2);
  const out = new Int16Array(n);
  Buffer.from(out.buffer).set(wav.data.subarray(0, n * 2));
  return out;
}
