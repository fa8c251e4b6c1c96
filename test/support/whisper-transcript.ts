import { expect } from "vitest";
import { verboseTranscription, type VerboseTranscription } from "../../schemas/transcription";
import { TINY_TOKENS_PER_WINDOW } from "./workers-whisper-model";

/**
 * The documented verbose_json shape (docs/segment.md) of a transcript of the generated
 * whisper model, whatever its words: words trimmed, in order and inside the clip,
 * segments numbered from 0 and built from the words, the text their join, and no more
 * words than whisper.cpp decodes in the clip's 30 s windows.
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
  expect(r.words.length).toBeLessThanOrEqual(TINY_TOKENS_PER_WINDOW * Math.ceil(durationSeconds / 30));
  expect(r.segments.map((s) => s.id)).toEqual(r.segments.map((_, i) => i));
  for (const s of r.segments) {
    expect(s.start).toBeGreaterThanOrEqual(0);
    expect(s.end).toBeGreaterThanOrEqual(s.start);
    expect(s.end).toBeLessThanOrEqual(durationSeconds);
  }
  expect(r.segments.map((s) => s.text.trim()).join(" ")).toBe(r.text);
  expect(r.text.split(/\s+/).filter(Boolean)).toEqual(r.words.map((w) => w.word));
}
