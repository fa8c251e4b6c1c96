import type { SpeakerTurn } from "../diarization/diarize";
import type { ShapedWord, TranscriptStage } from "./stage";

/**
 * Speaker labels as a pipeline stage (docs/diarization.md): every word with times gets
 * the `speaker` of the turn it overlaps most, or of the nearest turn when it overlaps
 * none (a word the diarizer's speech regions left out). The turns come from a diarizer
 * that heard the whole clip (domain/diarization), on the same timeline as the words.
 * Labels depend on a word's own times only, so streamed words are labelled as they go.
 * `shapeTranscription` (pipeline.ts) runs it before the other stages and splits segments
 * where the speaker changes, so each turn's text is formatted as its own run.
 */
export function speakerStage(turns: readonly SpeakerTurn[]): TranscriptStage {
  const label = (words: readonly ShapedWord[]): ShapedWord[] =>
    words.map((w) => {
      if (w.start_ms === undefined) return w;
      const speaker = speakerAt(turns, w.start_ms / 1000, (w.end_ms ?? w.start_ms) / 1000);
      return speaker === undefined ? w : { ...w, speaker };
    });
  return { name: "speaker", shape: label, shapeStreamed: label };
}

/** The speaker of [start, end): the turn overlapping it most, else the nearest; undefined without turns. */
export function speakerAt(turns: readonly SpeakerTurn[], start: number, end: number): number | undefined {
  let best: SpeakerTurn | undefined;
  let bestScore = -Infinity;
  for (const t of turns) {
    // the overlap when positive, else minus the gap between them
    const score = Math.min(end, t.end) - Math.max(start, t.start);
    if (score > bestScore) [best, bestScore] = [t, score];
  }
  return best?.speaker;
}

/** `metadata.speaker_roles` ({"0": "agent", "1": "customer"}) as speaker → role; others ignored. */
export function speakerRolesOf(metadata: unknown): Map<number, string> {
  const roles = new Map<number, string>();
  const given = (metadata as { speaker_roles?: unknown } | null | undefined)?.speaker_roles;
  if (!given || typeof given !== "object" || Array.isArray(given)) return roles;
  for (const [k, v] of Object.entries(given)) if (/^\d{1,3}$/.test(k) && typeof v === "string" && v.trim()) roles.set(Number(k), v.trim().slice(0, 64));
  return roles;
}
