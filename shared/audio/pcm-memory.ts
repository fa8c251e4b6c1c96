import { AppError } from "../errors";

/**
 * A per-process bound on the decoded audio (16 kHz mono PCM16) held in memory at once.
 *
 * Why it exists: a segment clip is sent to its worker whole (the engines read the whole
 * clip: pocketsphinx normalises over it, whisper and OpenAI-compatible servers take one
 * file), so a clip's PCM lives in the serving process from its decode until the worker
 * answers: 32,000 bytes a second, 461 MB for a 4-hour clip a pro key may send as a
 * 32 KB FLAC of silence. Uploads are small and plans are per key, so nothing else
 * bounds how much of it several tenants hold at once.
 *
 * Each request takes a hold on the bytes its PCM needs before it allocates them, and
 * gives them back when it is done with the clip:
 * - a clip that needs more than the whole bound can never be held: 413 `audio_too_long`
 *   (retrying cannot help);
 * - a clip that does not fit beside the holds of other requests now: 503 `server_busy`
 *   with `Retry-After`, before the PCM is allocated (and, when the probe knows the
 *   length, before anything is decoded).
 * The accounting is of bytes promised, not measured: the collector frees a released
 * clip a little later, so the process's RSS runs at most about one clip past it.
 */
export interface PcmMemory {
  readonly limitBytes: number;
  /** Bytes held by requests now. */
  inUse(): number;
  /** Takes `bytes` or throws (413 `audio_too_long` over the whole bound, 503 `server_busy` when full). */
  hold(bytes: number): PcmHold;
}

export interface PcmHold {
  readonly bytes: number;
  /** Grows or shrinks the hold to `bytes` (the clip's exact size once decoded); throws like hold() when growing does not fit. */
  resize(bytes: number): void;
  /** Gives the bytes back; a second call does nothing. */
  release(): void;
}

/** 16 kHz mono PCM16: the bytes one second of decoded audio takes. */
export const PCM_BYTES_PER_SECOND = 32_000;
/** What a refused request is told to wait: long enough for a few clips to finish, short enough not to idle a freed server. */
export const SERVER_BUSY_RETRY_AFTER_SECONDS = 5;

/** A refusal of pcm-memory's (over the whole bound, or full now), told apart from a decode's own length check. */
export class PcmMemoryRefusal extends AppError {}

export function createPcmMemory(limitBytes: number): PcmMemory {
  let used = 0;
  const mb = (bytes: number) => `${Math.ceil(bytes / (1024 * 1024))} MB`;
  const admit = (more: number, total: number) => {
    if (total > limitBytes) {
      throw new PcmMemoryRefusal(
        "too_large",
        "audio_too_long",
        `decoded, this clip takes ${mb(total)} of memory; this server holds at most ${mb(limitBytes)} of decoded audio per request (DECODE_MEMORY_MAX_MB)`,
        { param: "file", type: "invalid_request_error" },
      );
    }
    if (used + more > limitBytes) {
      throw new PcmMemoryRefusal("unavailable", "server_busy", `the server is decoding as much audio as it can hold (${mb(limitBytes)}); retry in a few seconds`, {
        headers: { "Retry-After": String(SERVER_BUSY_RETRY_AFTER_SECONDS) },
      });
    }
    used += more;
  };
  return {
    limitBytes,
    inUse: () => used,
    hold(bytes) {
      const want = Math.max(0, Math.ceil(bytes));
      admit(want, want);
      let held = want;
      let released = false;
      return {
        get bytes() {
          return released ? 0 : held;
        },
        resize(next) {
          if (released) return;
          const want = Math.max(0, Math.ceil(next));
          if (want > held) admit(want - held, want);
          else used -= held - want;
          held = want;
        },
        release() {
          if (released) return;
          released = true;
          used -= held;
        },
      };
    },
  };
}
