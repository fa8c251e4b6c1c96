import { loadVadEngine, VAD_FRAME_SAMPLES, VAD_SAMPLE_RATE } from "../../shared/audio/vad";
import { diarizePcm, type Diarizer, type SpeechRegion } from "./diarize";

/** WebRTC VAD aggressiveness of the diarizer's speech regions: 2 keeps quiet speech (a telephone-band voice at half level) that 3, the realtime default, misses. */
const VAD_AGGRESSIVENESS = 2;
/** Unvoiced runs of at most this many 30 ms frames inside speech are kept as speech. */
const HOLE_FRAMES = 3;
/** Voiced runs shorter than this many frames (a click) are dropped. */
const MIN_RUN_FRAMES = 3;

/**
 * The embedded diarizer (diarize.ts) over the project's WebRTC VAD: needs no model, runs
 * in the calling process (about 10 ms of CPU per audio second: docs/diarization.md).
 */
export const embeddedDiarizer: Diarizer = {
  name: "embedded",
  async diarize(pcm, hint) {
    const vad = await loadVadEngine();
    return diarizePcm(pcm, speechRegions(vad.classifyFrames(pcm, VAD_AGGRESSIVENESS)), hint);
  },
};

/** 30 ms VAD decisions → speech regions in seconds, short holes filled and clicks dropped. Pure. */
export function speechRegions(frames: Uint8Array): SpeechRegion[] {
  const seconds = VAD_FRAME_SAMPLES / VAD_SAMPLE_RATE;
  const runs: [number, number][] = [];
  for (let f = 0; f < frames.length; f++) {
    if (!frames[f]) continue;
    const last = runs[runs.length - 1];
    if (last && f - last[1] <= HOLE_FRAMES) last[1] = f + 1;
    else runs.push([f, f + 1]);
  }
  return runs.filter(([a, b]) => b - a >= MIN_RUN_FRAMES).map(([a, b]) => ({ start: a * seconds, end: b * seconds }));
}
