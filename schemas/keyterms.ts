import { z } from "zod";
import { unstorableReason } from "./safe-string";

/**
 * `keyterms` (OpenAI's door: `keywords`): words and phrases recognition should favour,
 * such as names, products and jargon (docs/segment-reference.md "Keyterms"). At most MAX_KEYTERMS
 * terms of at most MAX_KEYTERM_CHARS characters each; they bias every engine as the
 * prompt does (shared/workers/keyterms.ts) and are the caller's vocabulary for smart
 * formatting and redaction (domain/transcript/terms.ts).
 */
const MAX_KEYTERMS = 100;
const MAX_KEYTERM_CHARS = 50;

export const KEYTERMS_DESCRIPTION = `words and phrases to favour in recognition (names, products, jargon): at most ${MAX_KEYTERMS} terms of at most ${MAX_KEYTERM_CHARS} characters; they bias every engine as \`prompt\` does and combine with it, and a word the embedded engine's dictionary lacks is given a pronunciation`;

/** One term, already trimmed: 1–50 characters Postgres can store, no control characters. */
function termProblem(term: string): string | null {
  if (term.length === 0) return "a keyterm is empty";
  if (term.length > MAX_KEYTERM_CHARS) return `a keyterm must be at most ${MAX_KEYTERM_CHARS} characters (${JSON.stringify(term.slice(0, 20))}… has ${term.length})`;
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(term)) return "a keyterm must not contain control characters";
  const unstorable = unstorableReason(term);
  return unstorable ? `a keyterm ${unstorable}` : null;
}

/** Distinct terms (first spelling kept, compared case-insensitively), or the problem with them. */
function checkTerms(values: string[], ctx: z.RefinementCtx): string[] {
  const seen = new Set<string>();
  const terms: string[] = [];
  for (const raw of values) {
    const term = raw.trim().replace(/\s+/g, " ");
    const problem = termProblem(term);
    if (problem) {
      ctx.addIssue({ code: "custom", message: problem });
      return z.NEVER;
    }
    if (seen.has(term.toLowerCase())) continue;
    seen.add(term.toLowerCase());
    terms.push(term);
  }
  if (terms.length > MAX_KEYTERMS) {
    ctx.addIssue({ code: "custom", message: `at most ${MAX_KEYTERMS} keyterms (got ${terms.length})` });
    return z.NEVER;
  }
  return terms;
}

/** A JSON body's `keyterms` (the job body, a realtime session): an array of strings, or one comma-separated string. */
export const keytermsJson = z
  .union([z.string(), z.array(z.string()).max(MAX_KEYTERMS * 4, `at most ${MAX_KEYTERMS} keyterms`)], { error: "keyterms must be an array of strings" })
  .transform((v, ctx) => checkTerms(Array.isArray(v) ? v : v.split(",").filter((s) => s.trim() !== ""), ctx))
  .describe(KEYTERMS_DESCRIPTION);

/**
 * Text values of a form field or query parameter (repeated): each comma-separated, or a
 * JSON array of strings (a value starting with "[").
 */
export const keytermValues = z.array(z.string()).transform((values, ctx): string[] => {
  const split: string[] = [];
  for (const v of values) {
    const t = v.trim();
    if (t.startsWith("[")) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(t);
      } catch {
        ctx.addIssue({ code: "custom", message: "keyterms: a value starting with [ must be a JSON array of strings" });
        return z.NEVER;
      }
      if (!Array.isArray(parsed) || parsed.some((s) => typeof s !== "string")) {
        ctx.addIssue({ code: "custom", message: "keyterms: a value starting with [ must be a JSON array of strings" });
        return z.NEVER;
      }
      split.push(...(parsed as string[]));
    } else split.push(...t.split(",").filter((s) => s.trim() !== ""));
  }
  return checkTerms(split, ctx);
});
