import type { VerboseTranscription } from "../../schemas/transcription";
import { createFrameClassifier } from "./vad-frames";

/**
 * Whether a clip holds anything like speech, asked before an engine hears it
 * (`heardIfSpeech`: whisper.cpp and OpenAI-compatible workers, services/transcriber/worker-service.ts,
 * and the fallback provider, shared/workers/router.ts): a clip with none comes back with
 * empty text and the engine never sees it. Whisper-class engines invent words on silence and noise
 * ("Thank you.", a loop of one word); gated here, every engine on every plane answers
 * silence, noise and room hum with nothing.
 *
 * Speech-like: a 300 ms stretch (10 frames of 30 ms) in which at least half the frames
 * are voiced for the WebRTC VAD (libfvad, its most aggressive mode, the classifier the
 * diarizer uses) and cross zero on fewer than 40% of their samples. The VAD alone calls
 * white noise speech (every frame of 10 s of it), since it judges sub-band energies;
 * voiced speech crosses zero on 5 to 13% of its samples (the labelled clips' voiced
 * frames: medians 0.05–0.09), white noise on half of them. A hand-written rule on top
 * of the library VAD because the well-kept noise-robust VAD (Silero) needs an ONNX
 * runtime the service does not otherwise carry; the 40% bound leaves speech under
 * noise down to a few dB of signal-to-noise ratio to the engine. What it does not
 * catch: a loud low rumble the VAD hears as voiced (a synthetic 50 Hz rumble at
 * −24 dBFS passes); the engine then judges it (PocketSphinx answers it with nothing).
 *
 * Early out: the clip is read 300 ms at a time and the first speech-like stretch ends
 * the scan, so a clip with speech near its start costs a few frames (≈ 0.1 ms).
 */
const FRAME = 480;
const WINDOW = 10;
/** Fewer frames than this (90 ms) say nothing either way: the engine hears them. */
const MIN_FRAMES = 3;
const MAX_ZERO_CROSSING_RATE = 0.4;

/** What an engine hears in the clip, or, for a clip without speech, its duration and no words without asking the engine. */
export async function heardIfSpeech(pcm: Int16Array, language: string | undefined, hear: () => Promise<VerboseTranscription>): Promise<VerboseTranscription> {
  if (await holdsSpeech(pcm)) return hear();
  return { task: "transcribe", language: language ?? "en", duration: Math.round((pcm.length / 16_000) * 1000) / 1000, text: "", segments: [], words: [] };
}

export async function holdsSpeech(pcm: Int16Array): Promise<boolean> {
  const frames = Math.floor(pcm.length / FRAME);
  if (frames < MIN_FRAMES) return true;
  const need = Math.ceil(Math.min(WINDOW, frames) / 2);
  const classifier = await createFrameClassifier(3);
  try {
    const recent: number[] = [];
    let inWindow = 0;
    for (let at = 0; at < frames; at += WINDOW) {
      const chunk = pcm.subarray(at * FRAME, Math.min(frames, at + WINDOW) * FRAME);
      const voiced = classifier.classify(chunk);
      for (let f = 0; f < voiced.length; f++) {
        const like = voiced[f] === 1 && zeroCrossingRate(chunk.subarray(f * FRAME, (f + 1) * FRAME)) < MAX_ZERO_CROSSING_RATE ? 1 : 0;
        recent.push(like);
        inWindow += like;
        if (recent.length > WINDOW) inWindow -= recent.shift()!;
        if (inWindow >= need) return true;
      }
    }
    return false;
  } finally {
    classifier.free();
  }
}

function zeroCrossingRate(frame: Int16Array): number {
  let n = 0;
  for (let i = 1; i < frame.length; i++) if (frame[i]! >= 0 !== frame[i - 1]! >= 0) n++;
  return n / (frame.length - 1);
}
