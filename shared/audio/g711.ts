/**
 * G.711 (ITU-T) µ-law and A-law → PCM16, as telephony clients send them (OpenAI's
 * `audio/pcmu` / `audio/pcma`, beta `g711_ulaw` / `g711_alaw`): one byte per sample at
 * 8 kHz. Decoding is a 256-entry table per law, built once.
 */
function ulawSample(byte: number): number {
  const u = ~byte & 0xff;
  const t = (((u & 0x0f) << 3) + 0x84) << ((u & 0x70) >> 4);
  return u & 0x80 ? 0x84 - t : t - 0x84;
}

function alawSample(byte: number): number {
  const a = byte ^ 0x55;
  const seg = (a & 0x70) >> 4;
  let t = (a & 0x0f) << 4;
  t = seg === 0 ? t + 8 : seg === 1 ? t + 0x108 : (t + 0x108) << (seg - 1);
  return a & 0x80 ? t : -t;
}

const tableOf = (decode: (byte: number) => number) => Int16Array.from({ length: 256 }, (_, b) => decode(b));
const ULAW = tableOf(ulawSample);
const ALAW = tableOf(alawSample);

export type G711Law = "ulaw" | "alaw";

/** One PCM16 sample per input byte (8 kHz, as the input). */
export function decodeG711(bytes: Uint8Array, law: G711Law): Int16Array {
  const table = law === "ulaw" ? ULAW : ALAW;
  const out = new Int16Array(bytes.length);
  for (let i = 0; i < bytes.length; i++) out[i] = table[bytes[i]!]!;
  return out;
}
