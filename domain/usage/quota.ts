/**
 * The quota rules, pure: billing windows and how the live audio budget (budget.ts)
 * grants seconds. Billing windows are fixed, UTC-aligned intervals of
 * `USAGE_WINDOW_SECONDS` (default 86 400: one UTC day); a window's audio seconds are
 * compared with the plan's `maxAudioSecondsPerWindow`, where 0 means no window budget.
 */

/** Start of the billing window that holds `at`. */
export function windowStart(at: Date, windowSeconds: number): Date {
  const ms = windowSeconds * 1000;
  return new Date(Math.floor(at.getTime() / ms) * ms);
}

/** The billing window that holds `at`. */
export function billingWindow(at: Date, windowSeconds: number): { start: Date; end: Date; seconds: number } {
  const start = windowStart(at, windowSeconds);
  return { start, end: new Date(start.getTime() + windowSeconds * 1000), seconds: windowSeconds };
}

/** Seconds to the millisecond, as usage is recorded and shown. */
export const round3 = (x: number) => Math.round(x * 1000) / 1000;

/** A plan with no window budget (`maxAudioSecondsPerWindow` 0) is never refused for audio. */
export const isUnlimited = (windowLimit: number) => windowLimit <= 0;

/** Seconds left of `limit` once `used` is spent, to the millisecond (never negative). */
export const secondsLeft = (limit: number, used: number) => Math.max(0, round3(limit - used));

/** Whole seconds left of `limit` once `used` is spent (never negative). */
export const wholeSecondsLeft = (limit: number, used: number) => Math.max(0, Math.floor(limit - used));

/** What a claim of `seconds` is granted with `left` in the window: all of it, or with `partial` what is left. */
export function claimGrant(left: number, seconds: number, partial: boolean): number {
  return left >= seconds ? seconds : partial ? Math.max(0, left) : 0;
}

/**
 * What a gateway drawing for its segment requests is granted: `need` (or nothing, when
 * it does not fit) plus as much of `extra` as is left beyond it.
 */
export function blockGrant(left: number, need: number, extra: number): number {
  return left >= need ? need + Math.max(0, Math.min(extra, left - need)) : 0;
}

/** The extra seconds a gateway draws at once for its segment requests: 1% of the window's budget, at most 300 s. */
export const budgetBlockSeconds = (limit: number) => Math.min(300, limit * 0.01);

/** The counter after giving `seconds` back (never below 0). */
export const afterRelease = (used: number, seconds: number) => Math.max(0, used - seconds);

/** The budget counter of a key's window: `<keyId>.<window start in epoch seconds>`. */
export const budgetCounterKey = (keyId: string, start: Date) => `${keyId}.${Math.floor(start.getTime() / 1000)}`;

/** A stored counter's value, or undefined when it is empty or not a finite number ≥ 0. */
export function parseCounter(text: string): number | undefined {
  if (text.length === 0) return undefined;
  const n = Number(text);
  return Number.isFinite(n) && n >= 0 ? n : undefined;
}
