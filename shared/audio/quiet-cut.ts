/** The VAD's rate (vad.ts `RATE`; not imported, vad.ts imports this). */
const RATE = 16_000;

/**
 * Where an utterance that reached `max_utterance_ms` is cut (shared/audio/vad.ts): the
 * middle of its quietest 100 ms within `searchMs` before `end` (a pause between words or
 * a breath), not wherever the limit falls, which is mid-word as often as not, and the
 * engine decodes both sides far worse. Never earlier than `earliest`. Samples are
 * timeline positions; `buf[i]` is the sample at `bufStart + i`. Pure: the same speech is
 * cut at the same place whatever the client's frames.
 */
export function quietestCut(buf: Int16Array, bufStart: number, earliest: number, end: number, searchMs = 3000): number {
  const step = RATE / 100; // 10 ms
  const span = 10; // steps in the 100 ms window
  const from = Math.max(earliest, bufStart, end - (searchMs * RATE) / 1000);
  const energy: number[] = [];
  for (let at = from; at + step <= end; at += step) {
    let sum = 0;
    for (let i = at - bufStart; i < at - bufStart + step; i++) sum += buf[i]! * buf[i]!;
    energy.push(sum);
  }
  if (energy.length < span) return end;
  let window = energy.slice(0, span).reduce((a, b) => a + b, 0);
  let best = { at: 0, sum: window };
  for (let k = span; k < energy.length; k++) {
    window += energy[k]! - energy[k - span]!;
    if (window < best.sum) best = { at: k - span + 1, sum: window };
  }
  return from + (best.at + span / 2) * step;
}
