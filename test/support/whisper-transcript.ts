import { expect } from "vitest";
import { verboseTranscription, type VerboseTranscription } from "../../schemas/transcription";
import { TINY_TOKENS_PER_WINDOW } from "./workers-whisper-model";

/**
 * The documented verbose_json shape (docs/segment.md) of a transcript of the generated
 * whisper model, whatever its words: words trimmed, in order and inside the clip,
 * segments numbered from 0 and built from the words, the text their join, and output
 * bounded: a decoding pass yields at most TINY_TOKENS_PER_WINDOW tokens, and whisper.cpp
 * (1.9) starts its next pass at the last timestamp the pass gave, so a 30 s window may
 * take several passes when they end early (with a prompt they do on this model); no more
 * than a pass per second of audio is allowed here, and a loop that never advances fails.
 */
export function expectWellFormedTranscript(r: VerboseTranscription, durationSeconds: number): void {
  verboseTranscription.parse(r);
  expect(r.duration).toBeCloseTo(durationSeconds, 2);
  let last = 0;
  for (const w of r.words) {
    expect(w.word.length).toBeGreaterThan(0);
    expect(w.word.trim()).toBe(w.word);
    expect(w.start).toBeGreaterThanOrEqual(last);
    expect(w.end).toBeGreaterThanOrEqual(w.start);
    expect(w.end).toBeLessThanOrEqual(durationSeconds);
    last = w.start;
  }
  expect(r.words.length).toBeLessThanOrEqual(TINY_TOKENS_PER_WINDOW * Math.ceil(durationSeconds));
  expect(r.segments.map((s) => s.id)).toEqual(r.segments.map((_, i) => i));
  for (const s of r.segments) {
    expect(s.start).toBeGreaterThanOrEqual(0);
    expect(s.end).toBeGreaterThanOrEqual(s.start);
    expect(s.end).toBeLessThanOrEqual(durationSeconds);
  }
  expect(r.segments.map((s) => s.text.trim()).join(" ")).toBe(r.text);
  expect(r.text.split(/\s+/).filter(Boolean)).toEqual(r.words.map((w) => w.word));
}
