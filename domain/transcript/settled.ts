import type { VerboseTranscription } from "../../schemas/transcription";
import { shapeTranscription, type TranscriptPipeline } from "./pipeline";

/**
 * A clip streamed piece by piece (`stream=true` on the segment plane): the text of each
 * segment that no later piece can change, in clip order. The pieces so far are shaped as
 * one transcript, exactly as the whole clip will be at the end (so the deltas and `done`
 * agree on every form and every label), and the segments from the one holding the
 * first word a stage would hold back are left for later: redaction's open digit run, a
 * card number whose groups were spoken across a pause at a cut.
 *
 * The engine's segments carry the words to hold by their text (an engine that gives no
 * words has only that); the shaped segments that start at or after the first held
 * segment wait (a speaker change may have cut one engine segment into several). A
 * transcript without segments waits for the end.
 */
export function settledSegments(pipeline: TranscriptPipeline, stitched: VerboseTranscription): string[] {
  const shaped = shapeTranscription(pipeline, stitched);
  const heldFrom = firstHeldSegmentStart(pipeline, stitched);
  return shaped.segments
    .filter((s) => s.start < heldFrom)
    .map((s) => s.text.trim())
    .filter(Boolean);
}

/** Where the segment holding the first held word starts (seconds); Infinity when nothing is held. */
function firstHeldSegmentStart(pipeline: TranscriptPipeline, stitched: VerboseTranscription): number {
  const tokens = stitched.segments.map((s) => s.text.split(/\s+/).filter(Boolean));
  const held = Math.max(0, ...pipeline.stages.map((stage) => stage.held?.(tokens.flat()) ?? 0));
  if (held === 0) return Infinity;
  let left = held;
  for (let j = tokens.length - 1; j >= 0; j--) {
    left -= tokens[j]!.length;
    if (left <= 0) return stitched.segments[j]!.start;
  }
  return -Infinity;
}
