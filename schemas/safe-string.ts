import { z } from "zod";

/**
 * Strings that JSON carries but Postgres cannot store. JSON (and JavaScript) allow the
 * NUL character and lone UTF-16 surrogates ("\ud800"); Postgres `text` refuses NUL
 * (SQLSTATE 22021) and `jsonb` refuses both escapes (22P05, 22P02). A body field that
 * becomes an event is projected into Postgres later, by another process, where the
 * client can no longer be told; so every such field is checked here, at the edge, with
 * a 400 `invalid_string` naming it. Projections still dead-letter whatever slips past
 * (an old or foreign writer): shared/projection.ts.
 */

/** The error code of a refused string (HTTP 400 `code`, WS `error.code`). */
export const INVALID_STRING = "invalid_string";

const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Why Postgres would refuse `s`, or null when it stores as is. */
export function unstorableReason(s: string): string | null {
  if (s.includes("\u0000")) return "contains the NUL character (U+0000)";
  if (loneSurrogate.test(s)) return "contains a lone UTF-16 surrogate";
  return null;
}

const refuseUnstorable = (v: string, ctx: z.RefinementCtx) => {
  const reason = unstorableReason(v);
  if (reason) ctx.addIssue({ code: "custom", message: `${reason}, which cannot be stored`, params: { code: INVALID_STRING } });
};

/**
 * A string of at most `max` characters that Postgres can store. Returns a ZodString,
 * so `.trim()`, `.min()`, `.regex()` chain on as usual.
 */
export function safeString(max: number, options: { error?: string } = {}) {
  return z
    .string(options.error ? { error: options.error } : undefined)
    .max(max, `must be at most ${max} characters`)
    .superRefine(refuseUnstorable);
}

/** Bounds of a free-form JSON object such as a job's `metadata`. */
export interface FreeJsonLimits {
  /** UTF-8 bytes of the object serialized as JSON. */
  maxBytes: number;
  /** Nesting levels, the object itself being level 1. */
  maxDepth: number;
  /** Characters of any key. */
  maxKeyChars: number;
}

interface JsonProblem {
  path: Array<string | number>;
  message: string;
  code: string;
}

/** The first problem of a parsed JSON value, walking keys before values, or null. */
export function findJsonProblem(value: unknown, limits: FreeJsonLimits, path: Array<string | number> = [], depth = 1): JsonProblem | null {
  if (typeof value === "string") {
    const reason = unstorableReason(value);
    return reason ? { path, message: `${reason}, which cannot be stored`, code: INVALID_STRING } : null;
  }
  if (value === null || typeof value !== "object") return null;
  if (depth > limits.maxDepth) return { path, message: `nests deeper than ${limits.maxDepth} levels`, code: "invalid_request" };
  const entries: Array<[string | number, unknown]> = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  for (const [key, child] of entries) {
    if (typeof key === "string") {
      // A bad key is reported at its parent: naming it would echo the bad string back.
      const reason = unstorableReason(key);
      if (reason) return { path, message: `has a key that ${reason}, which cannot be stored`, code: INVALID_STRING };
      if (key.length > limits.maxKeyChars) return { path, message: `has a key longer than ${limits.maxKeyChars} characters`, code: "invalid_request" };
    }
    const problem = findJsonProblem(child, limits, [...path, key], depth + 1);
    if (problem) return problem;
  }
  return null;
}

/**
 * A free-form JSON object (string keys, any JSON values) that Postgres can store as
 * `jsonb`: no NUL or lone surrogate in any key or string, bounded depth, key length and
 * serialized size.
 */
export function safeJsonObject(limits: FreeJsonLimits, options: { error?: string } = {}) {
  return z.record(z.string(), z.unknown(), options.error ? { error: options.error } : undefined).superRefine((value, ctx) => {
    const problem = findJsonProblem(value, limits);
    if (problem) {
      ctx.addIssue({ code: "custom", path: problem.path, message: problem.message, params: { code: problem.code } });
      return;
    }
    const bytes = new TextEncoder().encode(JSON.stringify(value)).length;
    if (bytes > limits.maxBytes) ctx.addIssue({ code: "custom", message: `is ${bytes} bytes as JSON, more than ${limits.maxBytes}`, params: { code: "invalid_request" } });
  });
}

/**
 * The error code a zod issue maps to: `invalid_string` for an unstorable string, the
 * issue's own code from these helpers, else `fallback`.
 */
export function issueErrorCode(issue: z.core.$ZodIssue | undefined, fallback: string): string {
  if (issue?.code !== "custom") return fallback;
  const code = (issue.params as { code?: unknown } | undefined)?.code;
  return typeof code === "string" ? code : fallback;
}

/** True when the issue is an unstorable string (NUL, lone surrogate) in a value or key. */
export const isUnstorableIssue = (issue: z.core.$ZodIssue | undefined) => issueErrorCode(issue, "") === INVALID_STRING;
