import { AppError } from "./errors";
import type { Db } from "./db/index";
import { isCasConflict } from "./lease-entry";
import type { Nats } from "./nats";
import type { Limits } from "./plans";
import { usedAudioSeconds, windowStart } from "./usage";

/**
 * The live audio budget of a key's billing window, shared by every plane and replica:
 * one counter per key and window in the file-backed KV bucket `budget`, moved only by
 * compare-and-set, so what is granted never exceeds `maxAudioSecondsPerWindow`.
 *
 * - Realtime sessions draw from it in slices as audio arrives (`claim`, partial grants)
 *   and give back what they did not use when they close (`release`).
 * - The segment plane draws a clip's exact length before transcribing it
 *   (`claim`, all or nothing) and gives it back if the request then fails.
 * - Batch jobs are refused at submit when nothing is left (`remaining`) and draw their
 *   audio when they complete (`consume`, which may overrun by that one job).
 *
 * The counter starts from the usage read model the first time a window is touched (or
 * after the entry expired), so it agrees with the billed usage; from then on it moves
 * ahead of the read model as audio is granted. Billing itself stays on the
 * UsageRecorded events.
 */
export interface AudioBudget {
  /** Seconds left in the window (Infinity when the plan has no window budget). */
  remaining(): Promise<number>;
  /** Grants up to `seconds` (all of it, or with `partial` whatever is left); returns what was granted. */
  claim(seconds: number, options?: { partial?: boolean }): Promise<number>;
  /** Gives back seconds granted but not used. */
  release(seconds: number): Promise<void>;
  /** Draws seconds already spent, whether or not they fit (batch jobs at completion). */
  consume(seconds: number): Promise<void>;
}

export interface BudgetDeps {
  nats: Nats;
  db: Db;
  windowSeconds: number;
}

const round3 = (x: number) => Math.round(x * 1000) / 1000;

/** The counter's value, or undefined when there is none or it is not a finite number ≥ 0. */
function readCounter(entry: { length: number; string(): string } | null): number | undefined {
  if (!entry || entry.length === 0) return undefined;
  const n = Number(entry.string());
  return Number.isFinite(n) && n >= 0 ? n : undefined;
}

export function audioBudget(deps: BudgetDeps, principal: { keyId: string; limits: Limits }, now: Date): AudioBudget {
  const limit = principal.limits.maxAudioSecondsPerWindow;
  const start = windowStart(now, deps.windowSeconds);
  const key = `${principal.keyId}.${Math.floor(start.getTime() / 1000)}`;
  const unlimited = limit <= 0;

  /** Reads the counter (seeding it from the read model), applies `change`, writes with CAS. */
  const update = async (change: (used: number) => number | undefined): Promise<number | undefined> => {
    const kv = await deps.nats.kv("budget");
    for (let attempt = 0; attempt < 50; attempt++) {
      const entry = await kv.get(key);
      const stored = readCounter(entry);
      // absent, expired or unreadable: start again from the read model (and overwrite it)
      const used = stored ?? (await usedAudioSeconds(deps.db, principal.keyId, now, deps.windowSeconds));
      const next = change(used);
      if (next === undefined) return used;
      try {
        if (entry) await kv.update(key, String(round3(next)), entry.revision);
        else await kv.create(key, String(round3(next)));
        return next;
      } catch (err) {
        if (!isCasConflict(err)) throw err;
        await new Promise((r) => setTimeout(r, Math.random() * Math.min(20, attempt + 1)));
      }
    }
    throw new AppError("unavailable", "budget_unavailable", "Could not update the audio budget; retry shortly.");
  };

  return {
    async remaining() {
      if (unlimited) return Number.POSITIVE_INFINITY;
      const kv = await deps.nats.kv("budget");
      const used = readCounter(await kv.get(key)) ?? (await usedAudioSeconds(deps.db, principal.keyId, now, deps.windowSeconds));
      return Math.max(0, round3(limit - used));
    },
    async claim(seconds, options = {}) {
      if (unlimited) return seconds;
      if (seconds <= 0) return 0;
      let granted = 0;
      await update((used) => {
        const left = limit - used;
        granted = left >= seconds ? seconds : options.partial ? Math.max(0, left) : 0;
        return granted > 0 ? used + granted : undefined;
      });
      return round3(granted);
    },
    async release(seconds) {
      if (unlimited || seconds <= 0) return;
      await update((used) => Math.max(0, used - seconds));
    },
    async consume(seconds) {
      if (unlimited || seconds <= 0) return;
      await update((used) => used + seconds);
    },
  };
}

/** Draws audio already spent by a key (a completed batch job), whatever its plan. */
export async function consumeAudioBudget(deps: BudgetDeps, keyId: string, seconds: number, at: Date): Promise<void> {
  const limits = { maxAudioSecondsPerWindow: Number.POSITIVE_INFINITY } as Limits;
  await audioBudget(deps, { keyId, limits }, at).consume(seconds);
}
