import { createFrameClassifier, VAD_FRAME_SECONDS } from "../../shared/audio/vad-frames";
import { diarizeFeatures, type Diarizer, type DiarizerAudio, type SpeechRegion } from "./diarize";
import { FRAME_HOP_SAMPLES, frameFeatures, type FrameFeatures } from "./features";

/** WebRTC VAD aggressiveness of the diarizer's speech regions: 2 keeps quiet speech (a telephone-band voice at half level) that 3, the realtime default, misses. */
const VAD_AGGRESSIVENESS = 2;
/** Unvoiced runs of at most this many 30 ms frames inside speech are kept as speech. */
const HOLE_FRAMES = 3;
/** Voiced runs shorter than this many frames (a click) are dropped. */
const MIN_RUN_FRAMES = 3;
/** Audio read and featurized at a time: 60 s (a multiple of both the VAD's and the features' frames). */
const PIECE_SAMPLES = 60 * 16_000;
/** A feature frame is 400 samples: a piece is read this much further so frames straddling its end are whole. */
const FRAME_OVERLAP_SAMPLES = 400 - FRAME_HOP_SAMPLES;

/**
 * The embedded diarizer (diarize.ts) over the project's WebRTC VAD: needs no model, runs
 * in the calling process, about 1.5 ms of CPU per audio second (docs/diarization.md).
 * The audio is read 60 s at a time; what is kept is 19 cepstra per 10 ms (about 30 MB
 * per audio hour, twice that while clustering) and one VAD decision per 30 ms.
 */
export const embeddedDiarizer: Diarizer = {
  name: "embedded",
  async diarize(audio, hint) {
    const vad = await createFrameClassifier(VAD_AGGRESSIVENESS);
    try {
      const { features, voiced } = await readFeatures(audio, (pcm) => vad.classify(pcm));
      return diarizeFeatures(features, speechRegions(voiced), hint);
    } finally {
      vad.free();
    }
  },
};

async function readFeatures(audio: DiarizerAudio, classify: (pcm: Int16Array) => Uint8Array): Promise<{ features: FrameFeatures; voiced: Uint8Array }> {
  const parts: FrameFeatures[] = [];
  const decisions: Uint8Array[] = [];
  for (let at = 0; at < audio.samples; at += PIECE_SAMPLES) {
    const end = Math.min(audio.samples, at + PIECE_SAMPLES);
    const pcm = await audio.read(at, Math.min(audio.samples, end + FRAME_OVERLAP_SAMPLES));
    const f = frameFeatures(pcm);
    // frames starting in this piece only; the next piece starts with the frame after them
    const frames = Math.min(f.frames, Math.ceil((end - at) / FRAME_HOP_SAMPLES));
    parts.push({ frames, dims: f.dims, values: f.values.subarray(0, frames * f.dims) });
    decisions.push(classify(pcm.subarray(0, end - at)));
    // a long clip is worked on between other requests, not in one block of the event loop
    await new Promise((resolve) => setImmediate(resolve));
  }
  const frames = parts.reduce((a, p) => a + p.frames, 0);
  const dims = parts[0]?.dims ?? 0;
  const values = new Float32Array(frames * dims);
  let f = 0;
  for (const p of parts) {
    values.set(p.values, f * dims);
    f += p.frames;
  }
  const voiced = new Uint8Array(decisions.reduce((a, d) => a + d.length, 0));
  let v = 0;
  for (const d of decisions) {
    voiced.set(d, v);
    v += d.length;
  }
  return { features: { frames, dims, values }, voiced };
}

/** 30 ms VAD decisions → speech regions in seconds, short holes filled and clicks dropped. Pure. */
export function speechRegions(frames: Uint8Array): SpeechRegion[] {
  const runs: [number, number][] = [];
  for (let f = 0; f < frames.length; f++) {
    if (!frames[f]) continue;
    const last = runs[runs.length - 1];
    if (last && f - last[1] <= HOLE_FRAMES) last[1] = f + 1;
    else runs.push([f, f + 1]);
  }
  return runs.filter(([a, b]) => b - a >= MIN_RUN_FRAMES).map(([a, b]) => ({ start: a * VAD_FRAME_SECONDS, end: b * VAD_FRAME_SECONDS }));
}

/** A clip held in memory as DiarizerAudio. */
export const pcmAudio = (pcm: Int16Array): DiarizerAudio => ({ samples: pcm.length, read: async (from, to) => pcm.subarray(from, to) });
