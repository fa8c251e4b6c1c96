import { AppError } from "../errors";

/**
 * What an upload says it is, learned before anything decodes it: sample rate, channels
 * and, when it can be known, the duration. Decoding is the expensive part (a 7 KB WAV
 * that declares 1 Hz resamples to an hour of 16 kHz audio), so callers refuse absurd
 * streams, clips over the plan and clips over the key's budget from the probe alone.
 *
 * This module is pure: the RIFF/WAVE header is parsed here (exact and free); other
 * containers are probed with ffprobe by shared/audio/decode.ts, which applies the same
 * range checks to what ffprobe reports.
 */

/** Telephony is the lowest rate speech comes at; below it a header is a lie or a bomb. */
const MIN_SAMPLE_RATE = 8_000;
/** The highest rate real recorders write (DXD 352.8 kHz, some 384 kHz interfaces). */
const MAX_SAMPLE_RATE = 384_000;
/** Far above any real recording; ffmpeg's own PCM decoder refuses past 64 as well. */
const MAX_CHANNELS = 64;

/**
 * How far a duration can be trusted:
 * - `exact`: counted from the bytes present (linear PCM, float, A-law, µ-law WAV);
 * - `header`: stated by the container (FLAC STREAMINFO, Xing/LAME frames, Ogg granule,
 *   MP4 moov): right unless the file lies about itself;
 * - `estimate`: ffprobe guessed it from the bitrate, or the stated length does not
 *   match the file size (truncated or growing files): only a hint.
 */
type DurationSource = "exact" | "header" | "estimate";

export interface AudioProbe {
  /** "wav" when the RIFF header was read here, otherwise ffprobe's format name. */
  format: string;
  sampleRate: number;
  channels: number;
  durationSeconds?: number;
  durationSource?: DurationSource;
}

/** What an empty upload is: an empty clip (the spec transcribes and bills it). */
export const EMPTY_PROBE: AudioProbe = { format: "empty", sampleRate: 16_000, channels: 1, durationSeconds: 0, durationSource: "exact" };

export function unsupportedAudio(message: string): AppError {
  return new AppError("unsupported", "unsupported_audio", message, { param: "file", type: "invalid_request_error" });
}

export function audioTooLong(maxSeconds: number, actualSeconds?: number): AppError {
  const got = actualSeconds === undefined ? "longer" : `${actualSeconds.toFixed(1)} s`;
  return new AppError("too_large", "audio_too_long", `audio is ${got}; this plan allows at most ${maxSeconds} s per request`, {
    param: "file",
    type: "invalid_request_error",
  });
}

/** 415 `unsupported_audio` unless the stream's rate and channel count are ones real audio has. */
export function assertPlausibleStream(sampleRate: number, channels: number, what = "the audio"): void {
  if (!Number.isFinite(sampleRate) || sampleRate < MIN_SAMPLE_RATE || sampleRate > MAX_SAMPLE_RATE) {
    throw unsupportedAudio(
      `${what} declares a sample rate of ${sampleRate} Hz; supported rates are ${MIN_SAMPLE_RATE}–${MAX_SAMPLE_RATE} Hz`,
    );
  }
  if (!Number.isInteger(channels) || channels < 1 || channels > MAX_CHANNELS) {
    throw unsupportedAudio(`${what} declares ${channels} channels; supported are 1–${MAX_CHANNELS}`);
  }
}

/**
 * The duration a caller may refuse a clip on before decoding it: an exact count or the
 * container's own statement, never a bitrate guess (a VBR file without an index would
 * be refused for a length it does not have). Unknown and guessed lengths are bounded
 * by the decode instead (`-t`, output and CPU caps in decode.ts).
 */
export function trustedDuration(probe: AudioProbe): number | undefined {
  return probe.durationSource === "exact" || probe.durationSource === "header" ? probe.durationSeconds : undefined;
}

/** 413 `audio_too_long` when the probe alone shows the clip is over `maxSeconds`. */
export function assertProbeFits(probe: AudioProbe, maxSeconds: number | undefined): void {
  const seconds = trustedDuration(probe);
  if (maxSeconds !== undefined && seconds !== undefined && seconds > maxSeconds) throw audioTooLong(maxSeconds, seconds);
}

/** WAV format codes whose frames have a fixed size, so the duration is bytes ÷ frame size. */
const FIXED_FRAME_CODES = new Set([1 /* PCM */, 3 /* IEEE float */, 6 /* A-law */, 7 /* µ-law */]);
const FIXED_FRAME_BITS: Record<number, number[]> = { 1: [8, 16, 24, 32], 3: [32, 64], 6: [8], 7: [8] };
const EXTENSIBLE = 0xfffe;

/**
 * Reads a RIFF/WAVE header: rate and channels are checked here (415 for absurd ones)
 * and, for fixed-size frames, the duration is counted from the data bytes actually
 * present, whatever the header's data size claims (a header may promise hours and hold
 * 7 KB; ffmpeg decodes only what is there).
 *
 * `head` may be only the start of a file of `totalBytes`: then a header whose chunks do
 * not fit in it returns undefined and the caller asks ffprobe. Returns undefined for
 * anything that is not RIFF/WAVE (RF64 included: ffprobe reads its 64-bit sizes).
 * A complete file that is RIFF/WAVE without a usable fmt and data chunk is 415.
 */
export function probeWavHeader(head: Uint8Array, totalBytes: number = head.byteLength): AudioProbe | undefined {
  const buf = Buffer.from(head.buffer, head.byteOffset, head.byteLength);
  if (buf.length < 12 || buf.toString("ascii", 0, 4) !== "RIFF" || buf.toString("ascii", 8, 12) !== "WAVE") return undefined;
  const whole = head.byteLength >= totalBytes;
  let offset = 12;
  let fmt: { code: number; channels: number; sampleRate: number; bits: number } | undefined;
  while (offset + 8 <= buf.length) {
    const id = buf.toString("ascii", offset, offset + 4);
    const size = buf.readUInt32LE(offset + 4);
    const body = offset + 8;
    if (id === "fmt ") {
      if (size < 16 || body + 16 > buf.length) break;
      const tag = buf.readUInt16LE(body);
      fmt = {
        code: tag === EXTENSIBLE && size >= 40 && body + 26 <= buf.length ? buf.readUInt16LE(body + 24) : tag,
        channels: buf.readUInt16LE(body + 2),
        sampleRate: buf.readUInt32LE(body + 4),
        bits: buf.readUInt16LE(body + 14),
      };
      assertPlausibleStream(fmt.sampleRate, fmt.channels, "the WAV header");
    } else if (id === "data" && fmt) {
      const probe: AudioProbe = { format: "wav", sampleRate: fmt.sampleRate, channels: fmt.channels };
      if (!FIXED_FRAME_CODES.has(fmt.code) || !FIXED_FRAME_BITS[fmt.code]!.includes(fmt.bits)) return probe;
      // Streaming writers put 0 or 0xffffffff in the size: take what is there.
      const present = Math.max(0, totalBytes - body);
      const bytes = size === 0 || size === 0xffffffff ? present : Math.min(size, present);
      const frameBytes = fmt.channels * (fmt.bits / 8);
      return { ...probe, durationSeconds: Math.floor(bytes / frameBytes) / fmt.sampleRate, durationSource: "exact" };
    }
    offset = body + size + (size % 2);
  }
  if (!whole) return undefined;
  throw unsupportedAudio(fmt ? "the WAV file is truncated: it has no data chunk" : "the WAV file is truncated or malformed: it has no complete fmt chunk");
}
