import type { TranscriptSegment, TranscriptWord, VerboseTranscription } from "../../schemas/transcription";
import { planSlices, type SlicePlan } from "../jobs/slicing";

/**
 * A long segment-plane clip cut into pieces that free engines decode at once, and the
 * pieces' results put back together (docs/segment.md, "Long clips in parallel").
 *
 * Cutting: the batch plane's silence-aware slicing (domain/jobs/slicing.ts `planSlices`):
 * n pieces of about D / n seconds, each boundary at the quietest 200 ms within
 * ±min(2 s, S / 4) of its target, so a cut lands in a pause between words whenever the
 * window holds one. How many pieces (`pieceCount`):
 *
 * - A clip shorter than `splitMinSeconds`, or with fewer than two engine slots free to
 *   take pieces, is one piece: the single-request path, unchanged.
 * - Otherwise one piece per slot, as long as every piece keeps at least half of
 *   `splitMinSeconds` (the engine's per-clip cost and its clip-wide normalisation want a
 *   few seconds of audio), and enough pieces that none is longer than `maxPieceSeconds`.
 *   More pieces than slots are rounded up to a whole number of rounds of the slots, so
 *   the last round is not one engine working while the others idle.
 *
 * Stitching: a piece's times are seconds from its own start; `placePiece` moves them by
 * the piece's exact start (its first sample ÷ 16 000) and keeps them inside the piece,
 * `stitchPieces` concatenates the placed pieces in order, numbers segments from 0 and
 * keeps word and segment starts monotonic. Formatting is the caller's, on the result.
 */
export interface PiecePolicy {
  /** Clips shorter than this (seconds) keep the single-request path; half of it is the shortest piece. */
  splitMinSeconds: number;
  /** The longest piece (seconds), unless the slicing's cap on slices raises it. */
  maxPieceSeconds: number;
}

/** A piece's place in the clip and what its engine answered (times from the piece's start). */
export interface PieceResult {
  startSample: number;
  endSample: number;
  result: VerboseTranscription;
}

const SAMPLE_RATE = 16_000;
const ms = (x: number) => Math.round(x * 1000) / 1000;

/** How many pieces a clip of `durationSeconds` makes with `slots` engines free to take them (see above). */
export function pieceCount(durationSeconds: number, slots: number, policy: PiecePolicy): number {
  if (slots < 2 || durationSeconds < policy.splitMinSeconds || durationSeconds <= 0) return 1;
  const most = Math.max(2, Math.floor(durationSeconds / (policy.splitMinSeconds / 2)));
  const least = Math.ceil(durationSeconds / policy.maxPieceSeconds);
  let n = Math.max(Math.min(slots, most), least);
  if (n > slots) n = Math.max(least, Math.min(most, Math.ceil(n / slots) * slots));
  return n;
}

/** The pieces of 16 kHz `pcm`: contiguous, covering it, cut at pauses (one piece: the whole clip). */
export function planPieces(pcm: Int16Array, slots: number, policy: PiecePolicy): SlicePlan[] {
  const duration = pcm.length / SAMPLE_RATE;
  const n = pieceCount(duration, slots, policy);
  if (n === 1) return [{ index: 0, startSample: 0, endSample: pcm.length }];
  return planSlices(pcm, SAMPLE_RATE, duration / n);
}

/** A piece's result on the clip's timeline: times moved by its start, kept inside it. */
export function placePiece(piece: PieceResult): VerboseTranscription {
  const offset = piece.startSample / SAMPLE_RATE;
  const end = piece.endSample / SAMPLE_RATE;
  const at = (t: number) => ms(Math.min(end, Math.max(offset, offset + t)));
  const words: TranscriptWord[] = piece.result.words.map((w) => ({ ...w, start: at(w.start), end: at(Math.max(w.end, w.start)) }));
  // an engine that answered text without segments: the piece is its segment
  const given = piece.result.segments.length || !piece.result.text.trim() ? piece.result.segments : [wholePiece(piece.result.text, end - offset)];
  const segments: TranscriptSegment[] = given.map((s) => ({
    ...s,
    // whisper counts seek in 10 ms frames from the start of the audio
    seek: s.seek + Math.round(offset * 100),
    start: at(s.start),
    end: at(Math.max(s.end, s.start)),
  }));
  return { ...piece.result, duration: ms(end - offset), segments, words };
}

function wholePiece(text: string, seconds: number): TranscriptSegment {
  return { id: 0, seek: 0, start: 0, end: seconds, text: ` ${text.trim()}`, tokens: [], temperature: 0, avg_logprob: 0, compression_ratio: 1, no_speech_prob: 0 };
}

/**
 * The pieces' results as one transcription of the whole clip (`durationSeconds` long),
 * in piece order: segments numbered from 0, word and segment starts never going back.
 * One piece is returned as its engine answered.
 */
export function stitchPieces(pieces: readonly PieceResult[], durationSeconds: number): VerboseTranscription {
  if (pieces.length === 1 && pieces[0]!.startSample === 0) return pieces[0]!.result;
  const ordered = [...pieces].sort((a, b) => a.startSample - b.startSample);
  const segments: TranscriptSegment[] = [];
  const words: TranscriptWord[] = [];
  let lastSegmentStart = 0;
  let lastWordStart = 0;
  for (const placed of ordered.map(placePiece)) {
    for (const s of placed.segments) {
      const start = Math.max(s.start, lastSegmentStart);
      segments.push({ ...s, id: segments.length, start, end: Math.max(s.end, start) });
      lastSegmentStart = start;
    }
    for (const w of placed.words) {
      const start = Math.max(w.start, lastWordStart);
      words.push({ ...w, start, end: Math.max(w.end, start) });
      lastWordStart = start;
    }
  }
  const texts = ordered.map((p) => p.result.text.trim()).filter(Boolean);
  return {
    task: "transcribe",
    language: ordered.find((p) => p.result.language)?.result.language ?? "en",
    duration: ms(durationSeconds),
    text: texts.join(" "),
    segments,
    words,
  };
}
