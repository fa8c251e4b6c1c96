import type { AudioBudget } from "../../domain/usage/budget";
import type { UsageStore } from "../../domain/usage/store";
import type { Logger } from "../../shared/logger";
import type { Admission } from "./admit";

/** Audio budget drawn per claim, and how far ahead of the audio the next claim starts. */
const BUDGET_SLICE_SECONDS = 5;
const BUDGET_LOOKAHEAD_MS = 3_000;
const USAGE_EVERY_MS = 30_000;

export interface AudioAllowance {
  /** Audio (ms) paid for so far. */
  readonly allowanceMs: number;
  /** A claim got less than it asked for: the key's window is used up. */
  readonly exhausted: boolean;
  /** Claims the next slice when the audio comes within BUDGET_LOOKAHEAD_MS of what is paid for. */
  topUp(): void;
  /** At close: waits for a claim in flight and gives back what was granted ahead of audio that never came. */
  release(): Promise<void>;
}

/**
 * Draws the next slice of the key's window budget (domain/usage/budget.ts) before the
 * audio needs it, so every session and plane of the key shares one live budget. If the
 * budget cannot be reached (NATS away), the slice is granted anyway (fail open, logged):
 * billing still follows the usage events. `settled` runs after each claim (the session
 * checks its close rule there and tops up again).
 */
export function createAudioAllowance(budget: AudioBudget, options: { audioMs: () => number; closed: () => boolean; log: Logger; settled: () => void }): AudioAllowance {
  const { audioMs, log } = options;
  let allowanceMs = 0;
  let exhausted = false;
  let claim: Promise<void> | null = null;
  const topUp = () => {
    if (claim || exhausted || options.closed()) return;
    if (allowanceMs - audioMs() > BUDGET_LOOKAHEAD_MS) return;
    claim = budget
      .claim(BUDGET_SLICE_SECONDS, { partial: true })
      .then(
        (granted) => {
          allowanceMs += granted * 1000;
          if (granted < BUDGET_SLICE_SECONDS) exhausted = true;
        },
        (err) => {
          log.warn("audio budget unavailable; granting the slice", { error: (err as Error).message });
          allowanceMs += BUDGET_SLICE_SECONDS * 1000;
        },
      )
      .finally(() => {
        claim = null;
        options.settled();
      });
  };
  return {
    get allowanceMs() {
      return allowanceMs;
    },
    get exhausted() {
      return exhausted;
    },
    topUp,
    async release() {
      await claim;
      const unused = Math.max(0, allowanceMs - audioMs()) / 1000;
      await budget.release(unused).catch((err) => log.warn("could not release unused audio budget", { error: (err as Error).message }));
    },
  };
}

export interface UsageMeter {
  /** The sweep: records the audio not yet recorded once USAGE_EVERY_MS of session time has passed since the last record. */
  tick(now: number): void;
  /** At close: the rest (the first record also counts the session's one request, even with no audio). */
  final(): Promise<void>;
}

/** Realtime usage: UsageRecorded every 30 s and at close, with deterministic ids `<sessionId>:usage:<n>`. */
export function createUsageMeter(
  usage: Pick<UsageStore, "record">,
  admission: Admission,
  options: { startedAt: number; audioMs: () => number; now: () => number; log: Logger; firstPart?: number },
): UsageMeter {
  const { sessionId, principal } = admission;
  const { audioMs } = options;
  let recordedMs = 0;
  // a resumed connection numbers its records on from its own base (the ids must not repeat the first connection's)
  let seq = options.firstPart ?? 0;
  const flush = async (final: boolean) => {
    const ms = audioMs() - recordedMs;
    if (ms <= 0 && (!final || seq > 0)) return;
    recordedMs += ms;
    const n = seq++;
    await usage.record({
      keyId: principal.keyId,
      ownerId: principal.ownerId,
      plane: "realtime",
      audioSeconds: ms / 1000,
      requests: n === 0 ? 1 : 0,
      subjectId: sessionId,
      part: n,
      at: new Date(options.now()),
    }).catch((err) => options.log.warn("could not record usage", { error: (err as Error).message }));
  };
  return {
    tick(now) {
      if (now - options.startedAt - recordedMs > USAGE_EVERY_MS && audioMs() - recordedMs > 0) void flush(false);
    },
    final: () => flush(true),
  };
}
