import { INTERNAL_SAMPLE_RATE } from "../../schemas/realtime";
import { decodeG711 } from "../../shared/audio/g711";
import { createResampler, type Resampler } from "../../shared/audio/resample";
import type { DoorConfig } from "./openai-config";

type DoorFormat = DoorConfig["format"];

/**
 * The OpenAI door's audio in (openai-door.ts): `input_audio_buffer.append`'s base64
 * decoded (PCM16 at 24 kHz, or G.711 expanded by table), resampled to the session's
 * 16 kHz mono and handed to the session in frames of at most its largest; how much the
 * client has appended since its last commit or clear (OpenAI refuses a commit under
 * 100 ms); and, resumed, the priming audio dropped.
 */
/**
 * How much audio before its position a resumed session asks for again, to fill the
 * resampler's filter (resample.ts: half of it is 2.5 ms at RESAMPLER_QUALITY, whatever the
 * rate). A whole number of milliseconds is a whole number of 24 and 8 kHz samples at the
 * same filter phase, so the resumed output continues the interrupted one sample for sample.
 */
const PRIME_MS = 10;
/** OpenAI's shortest committable buffer. */
const MIN_COMMIT_SAMPLES = INTERNAL_SAMPLE_RATE / 10;

/** `to` is the session: whether it takes audio now, and a frame of 16 kHz audio (a view: its publisher copies what it keeps). */
export function createDoorAudio(maxFrameBytes: number, to: { taking(): boolean; take(frame: Uint8Array): void }) {
  const resamplers: Partial<Record<"pcm" | "g711", Resampler>> = {};
  const chunkBytes = Math.max(2, Math.floor(maxFrameBytes / 2) * 2);
  /**
   * Audio appended since the last commit or clear, in 16 kHz samples. null after a resume
   * until the next commit or clear: the open item may hold audio sent before the cut, so
   * a commit goes to the session, which refuses one with nothing open itself (the same
   * error code).
   */
  let buffered: number | null = 0;
  /**
   * Resumed: the resampled samples (16 kHz) to drop before the session's audio goes on.
   * The client is told to resend from PRIME_MS before where the session stands, so a fresh
   * resampler's filter starts full and its output continues the interrupted one exactly.
   */
  let priming = 0;

  /** 16 kHz audio to the session, in frames of at most its largest. */
  const toSession = (pcm: Int16Array) => {
    const view = new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength);
    for (let at = 0; at < view.length && to.taking(); at += chunkBytes) to.take(view.subarray(at, at + chunkBytes));
  };
  /** The format's resampler; after a format switch the other one's last milliseconds go first, and it is dropped (a switch back starts afresh). */
  const resampler = (kind: "pcm" | "g711") => {
    const other = kind === "pcm" ? "g711" : "pcm";
    const previous = resamplers[other];
    if (previous) {
      delete resamplers[other];
      toSession(previous.flush());
      previous.free();
    }
    return (resamplers[kind] ??= createResampler(kind === "pcm" ? 24000 : 8000, INTERNAL_SAMPLE_RATE, 1));
  };

  return {
    /** One append in `format`; the client's mistake in words (param `audio`), or null. */
    append(audio: string, format: DoorFormat): string | null {
      // Node's decoder skips what is not base64, so a length short of what the text promises
      // is a bad character (a regular expression over every append cost more than the decode)
      const padding = audio.endsWith("==") ? 2 : audio.endsWith("=") ? 1 : 0;
      const bytes = audio.length % 4 === 0 ? Buffer.from(audio, "base64") : null;
      if (!bytes || bytes.length !== (audio.length / 4) * 3 - padding) return "Invalid 'audio'. Expected base64-encoded audio bytes.";
      if (bytes.length === 0) return null;
      let pcm: Int16Array;
      if (format === "pcm") {
        if (bytes.length % 2 !== 0) return "Invalid 'audio': audio/pcm holds whole 16-bit samples (an even number of bytes).";
        // Buffer.from may start at an odd offset in its pool: copy into aligned memory then
        const samples = bytes.byteOffset % 2 === 0 ? new Int16Array(bytes.buffer, bytes.byteOffset, bytes.length / 2) : new Int16Array(new Uint8Array(bytes).buffer);
        pcm = resampler("pcm").push(samples);
      } else pcm = resampler("g711").push(decodeG711(bytes, format === "pcmu" ? "ulaw" : "alaw"));
      // the client's audio as sent (its length at 16 kHz), not the resampler's output, which holds its last 2.5 ms back
      if (buffered !== null) buffered += format === "pcm" ? (bytes.length / 2) * (INTERNAL_SAMPLE_RATE / 24000) : bytes.length * (INTERNAL_SAMPLE_RATE / 8000);
      if (priming > 0) {
        const dropped = Math.min(priming, pcm.length);
        priming -= dropped;
        pcm = pcm.subarray(dropped);
        if (pcm.length === 0) return null;
      }
      toSession(pcm);
      return null;
    },
    /** Why a manual commit is refused (less than 100 ms appended since the last), or null. */
    commitRefusal(): string | null {
      if (buffered === null || buffered >= MIN_COMMIT_SAMPLES) return null;
      const ms = ((buffered * 1000) / INTERNAL_SAMPLE_RATE).toFixed(2);
      return `Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, but buffer only has ${ms}ms of audio.`;
    },
    /** The buffer starts again (a commit, a clear, the VAD's own commit). */
    emptied() {
      buffered = 0;
    },
    /** The session resumed at `audioMs`: the client resends from PRIME_MS before it; the position it is told. */
    resumedAt(audioMs: number): number {
      buffered = null; // what the open item held before the cut is not counted here
      const ms = Math.min(PRIME_MS, audioMs);
      priming = (ms * INTERNAL_SAMPLE_RATE) / 1000;
      return audioMs - ms;
    },
    /** session.close: the last milliseconds inside the resamplers' filters belong to the session's audio. */
    flush: () => Object.values(resamplers).forEach((r) => toSession(r.flush())),
    /** The socket is gone: the resamplers' WASM state is freed. */
    free: () => Object.values(resamplers).forEach((r) => r.free()),
  };
}
