import type { Limits } from "../../schemas/plans";
import type { Db } from "../../shared/db/index";
import { AppError } from "../../shared/errors";
import { isCasConflict } from "../../shared/lease-entry";
import type { Nats } from "../../shared/nats";
import { usedAudioSeconds } from "./queries";
import {
  afterRelease,
  blockGrant,
  budgetBlockSeconds,
  budgetCounterKey,
  claimGrant,
  isUnlimited,
  parseCounter,
  round3,
  secondsLeft,
  windowStart,
} from "./quota";

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
 * UsageRecorded events. This file is the counter's I/O; what a claim is granted is
 * decided in quota.ts.
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

/** The counter's value, or undefined when there is none or it is not a finite number ≥ 0. */
function readCounter(entry: { string(): string } | null): number | undefined {
  return entry ? parseCounter(entry.string()) : undefined;
}

/**
 * Reads the counter `key` (seeding it from the read model when absent, expired or
 * unreadable), applies `change` and writes the result with compare-and-set; `change`
 * answering undefined writes nothing. Resolves the counter as left.
 */
async function updateCounter(
  deps: BudgetDeps,
  keyId: string,
  key: string,
  now: Date,
  change: (used: number) => number | undefined,
): Promise<number> {
  const kv = await deps.nats.kv("budget");
  for (let attempt = 0; attempt < 50; attempt++) {
    const entry = await kv.get(key);
    const stored = readCounter(entry);
    // absent, expired or unreadable: start again from the read model (and overwrite it)
    const used = stored ?? (await usedAudioSeconds(deps.db, keyId, now, deps.windowSeconds));
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
  throw new AppError("unavailable", "budget_unavailable", "Could not update the audio budget; retry shortly.", { headers: { "Retry-After": "1" } });
}

export function audioBudget(deps: BudgetDeps, principal: { keyId: string; limits: Limits }, now: Date): AudioBudget {
  const limit = principal.limits.maxAudioSecondsPerWindow;
  const key = budgetCounterKey(principal.keyId, windowStart(now, deps.windowSeconds));
  const unlimited = isUnlimited(limit);
  const update = (change: (used: number) => number | undefined) => updateCounter(deps, principal.keyId, key, now, change);

  return {
    async remaining() {
      if (unlimited) return Number.POSITIVE_INFINITY;
      const kv = await deps.nats.kv("budget");
      const used = readCounter(await kv.get(key)) ?? (await usedAudioSeconds(deps.db, principal.keyId, now, deps.windowSeconds));
      return secondsLeft(limit, used);
    },
    async claim(seconds, options = {}) {
      if (unlimited) return seconds;
      if (seconds <= 0) return 0;
      let granted = 0;
      await update((used) => {
        granted = claimGrant(limit - used, seconds, options.partial ?? false);
        return granted > 0 ? used + granted : undefined;
      });
      return round3(granted);
    },
    async release(seconds) {
      if (unlimited || seconds <= 0) return;
      await update((used) => afterRelease(used, seconds));
    },
    async consume(seconds) {
      if (unlimited || seconds <= 0) return;
      await update((used) => used + seconds);
    },
  };
}

/**
 * The segment plane's view of the budget without a KV round trip per request: each
 * gateway draws a key's window from the same counter in blocks and spends them on clips
 * locally (all or nothing, as `claim` does).
 *
 * - Never more than `maxAudioSecondsPerWindow` granted across planes and gateways: the
 *   counter grants only what is left, and a gateway spends only what it was granted.
 * - A block is the clip's shortfall plus 1% of the window's budget (at most 300 s), as
 *   far as the counter has it. Seconds a gateway holds unspent are not available to the
 *   other planes and gateways: they may be refused up to one block per such gateway early,
 *   until the holder gives it back after `returnAfterMs` (default 1 s) without a segment
 *   request of that key. A gateway that dies strands at most one block until the window
 *   ends (the key can use that much less; it is never billed: billing is the usage events).
 * - `remaining()` answers from memory while it is at least the plan's
 *   maxAudioSecondsPerRequest (then the decode bound and the pre-decode check are the
 *   plan's whatever the exact figure); below that it reads the counter, as before.
 */
export interface SegmentBudgets {
  forKey(principal: { keyId: string; limits: Limits }, now: Date): Pick<AudioBudget, "remaining" | "claim" | "release">;
  /** Seconds this process holds unspent for the key in the current window. */
  unspent(keyId: string, now: Date): number;
  /** Gives every unspent block back. */
  stop(): Promise<void>;
}

interface Allowance {
  key: string;
  keyId: string;
  now: Date;
  /** Seconds granted by the counter and not spent. */
  held: number;
  /** What the counter had left after this process's last read or write. */
  left: number;
  synced: boolean;
  lastUse: number;
  /** Operations on one allowance run one after another. */
  chain: Promise<unknown>;
}

export function createSegmentBudgets(deps: BudgetDeps, options: { returnAfterMs?: number } = {}): SegmentBudgets {
  const returnAfterMs = options.returnAfterMs ?? 1000;
  const allowances = new Map<string, Allowance>();
  const serial = <T>(a: Allowance, op: () => Promise<T>, touch = true): Promise<T> => {
    const guarded = async () => {
      if (touch) a.lastUse = Date.now();
      try {
        return await op();
      } finally {
        // dropped by the sweep while a request still used it (a long decode): nothing may stay held
        if (allowances.get(a.keyId) !== a && a.held > 0) await giveBack(a).catch(() => undefined);
      }
    };
    const run = a.chain.then(guarded, guarded);
    a.chain = run.catch(() => undefined);
    return run;
  };
  /** Takes `need` seconds plus up to `extra` from the counter; resolves whether `need` was granted. */
  const take = async (a: Allowance, limit: number, need: number, extra: number): Promise<boolean> => {
    let granted = 0;
    const used = await updateCounter(deps, a.keyId, a.key, a.now, (u) => {
      granted = blockGrant(limit - u, need, extra);
      return granted > 0 ? u + granted : undefined;
    });
    a.left = Math.max(0, limit - used);
    a.held = round3(a.held + granted);
    a.synced = true;
    return need <= 0 || granted > 0;
  };
  /** Gives the held seconds back (taken out of the allowance first, so none is spent twice). */
  const giveBack = async (a: Allowance): Promise<void> => {
    const held = a.held;
    if (held <= 0) return;
    a.held = 0;
    a.synced = false;
    await updateCounter(deps, a.keyId, a.key, a.now, (u) => afterRelease(u, held));
  };
  const sweep = setInterval(() => {
    const now = Date.now();
    for (const [k, a] of allowances) {
      if (now - a.lastUse < returnAfterMs) continue;
      if (now - a.lastUse >= 60_000) allowances.delete(k);
      if (a.held > 0) void serial(a, () => giveBack(a), false).catch(() => undefined);
    }
  }, Math.max(50, returnAfterMs / 2));
  sweep.unref();

  const allowanceOf = (keyId: string, now: Date): Allowance => {
    const key = budgetCounterKey(keyId, windowStart(now, deps.windowSeconds));
    let a = allowances.get(keyId);
    if (!a || a.key !== key) {
      // a past window's seconds are moot: its counter is never read again
      a = { key, keyId, now, held: 0, left: 0, synced: false, lastUse: Date.now(), chain: Promise.resolve() };
      allowances.set(keyId, a);
    }
    a.lastUse = Date.now();
    return a;
  };

  return {
    forKey(principal, now) {
      const limit = principal.limits.maxAudioSecondsPerWindow;
      if (isUnlimited(limit)) return audioBudget(deps, principal, now);
      const a = allowanceOf(principal.keyId, now);
      const block = budgetBlockSeconds(limit);
      return {
        remaining: () =>
          serial(a, async () => {
            if (!a.synced) await take(a, limit, 0, block);
            if (a.held + a.left < principal.limits.maxAudioSecondsPerRequest) {
              const kv = await deps.nats.kv("budget");
              const used = readCounter(await kv.get(a.key));
              if (used !== undefined) a.left = Math.max(0, limit - used);
            }
            return Math.max(0, round3(a.held + a.left));
          }),
        claim: (seconds) =>
          serial(a, async () => {
            if (seconds <= 0) return 0;
            if (a.held < seconds && !(await take(a, limit, round3(seconds - a.held), block))) return 0;
            a.held = round3(a.held - seconds);
            return seconds;
          }),
        release: (seconds) =>
          serial(a, async () => {
            if (seconds > 0) a.held = round3(a.held + seconds);
          }),
      };
    },
    unspent(keyId, now) {
      const a = allowances.get(keyId);
      return a && a.key === budgetCounterKey(keyId, windowStart(now, deps.windowSeconds)) ? a.held : 0;
    },
    async stop() {
      clearInterval(sweep);
      await Promise.all([...allowances.values()].map((a) => serial(a, () => giveBack(a), false).catch(() => undefined)));
      allowances.clear();
    },
  };
}

/** Draws audio already spent by a key (a completed batch job), whatever its plan. */
export async function consumeAudioBudget(deps: BudgetDeps, keyId: string, seconds: number, at: Date): Promise<void> {
  const limits = { maxAudioSecondsPerWindow: Number.POSITIVE_INFINITY } as Limits;
  await audioBudget(deps, { keyId, limits }, at).consume(seconds);
}
