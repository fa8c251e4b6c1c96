import { findEntities, keysOf, mayContinue, type EntityLabel, type RedactRules } from "./redact";
import type { ShapedWord, TranscriptStage } from "./stage";

/**
 * Redaction as the last pipeline stage (docs/formatting.md "Redaction"): each entity's
 * words become one `[LABEL]` form (the first word carries it, the rest ""), every word of
 * it carries `entity`, and the delivered words show the label instead of what was said.
 * A span grows to whole formatted groups, so "+442079460958" from "plus four four …" or
 * "$300" is never half kept. `numbers` also takes any formatted form with a digit in it.
 *
 * Streamed words (`shapeStreamed`) that may still become part of an entity (the
 * trailing open digit run, an e-mail's pieces) are held back: the stage returns only the
 * words before them, and the caller offers the rest again with the next words.
 */
export function redactStage(rules: RedactRules): TranscriptStage {
  return {
    name: "redact",
    shape: (words) => redactRun(words, rules, 0),
    shapeStreamed(words, _before, sent = []) {
      const all = [...sent.map((word) => ({ word, form: word })), ...words];
      const open = Math.max(sent.length, all.length - openTail(all.map((w) => w.word), rules));
      return redactRun(all.slice(0, open), rules, sent.length).slice(sent.length);
    },
    held: (words) => openTail(words, rules),
  };
}

/** How many of the last words may still become part of an entity when more words follow (held back from a stream). */
function openTail(raw: readonly string[], rules: RedactRules): number {
  const k = keysOf(raw);
  let open = raw.length;
  while (open > 0 && mayContinue(k, raw, open - 1, rules)) open--;
  // a word that may still start an e-mail's mailbox waits for the next one
  if (rules.email && open === raw.length && open > 0) open--;
  return raw.length - open;
}

/** The run with its entities (those ending at or after `from`) replaced by their labels. */
function redactRun(words: readonly ShapedWord[], rules: RedactRules, from: number): ShapedWord[] {
  const out = [...words];
  const spans = findEntities(words.map((w) => w.word), rules);
  if (rules.numbers) {
    words.forEach((w, i) => {
      if (/\d/.test(w.form) && !spans.some((s) => i >= s.from && i < s.end)) spans.push({ from: i, end: i + 1, label: "NUMBER" });
    });
  }
  for (const s of spans) {
    if (s.end <= from) continue;
    let start = s.from;
    let end = s.end;
    // whole formatted groups: back to the word that carries the group's form, on over the ""s after it
    while (start > from && words[start]!.form === "") start--;
    while (end < words.length && words[end]!.form === "" && words[end]!.word !== "") end++;
    label(out, Math.max(start, from), end, s.label);
  }
  return out;
}

function label(out: ShapedWord[], from: number, end: number, entity: EntityLabel): void {
  const lastForm = out.slice(from, end).findLast((w) => w.form !== "")?.form ?? "";
  const closing = /[.?!,;:]+$/.exec(lastForm)?.[0] ?? "";
  for (let i = from; i < end; i++) out[i] = { ...out[i]!, form: i === from ? `[${entity}]${closing}` : "", entity };
}
