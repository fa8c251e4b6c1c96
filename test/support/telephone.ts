/**
 * A telephone channel: speech through a 300–3400 Hz band (two RBJ biquads) at half the
 * level. The test data has each speaker through one microphone only; this gives the same
 * voice a second, very different channel (bench/diarization.ts's channel difference, the
 * live labels' fold in test/realtime-diarize.test.ts).
 */
const RATE = 16_000;

/** RBJ biquad, in place. */
function biquad(x: Float64Array, kind: "lowpass" | "highpass", f0: number): void {
  const w = (2 * Math.PI * f0) / RATE;
  const alpha = Math.sin(w) / (2 * Math.SQRT1_2);
  const c = Math.cos(w);
  const [b0, b1, b2] = kind === "lowpass" ? [(1 - c) / 2, 1 - c, (1 - c) / 2] : [(1 + c) / 2, -(1 + c), (1 + c) / 2];
  const [a0, a1, a2] = [1 + alpha, -2 * c, 1 - alpha];
  let [x1, x2, y1, y2] = [0, 0, 0, 0];
  for (let i = 0; i < x.length; i++) {
    const y = (b0 * x[i]! + b1 * x1 + b2 * x2 - a1 * y1 - a2 * y2) / a0;
    [x2, x1, y2, y1] = [x1, x[i]!, y1, y];
    x[i] = y;
  }
}

/** 16 kHz PCM as heard through a telephone band at half the level. */
export function telephone(pcm: Int16Array): Int16Array {
  const x = Float64Array.from(pcm);
  biquad(x, "highpass", 300);
  biquad(x, "lowpass", 3400);
  return Int16Array.from(x, (v) => Math.max(-32768, Math.min(32767, Math.round(v * 0.5))));
}
