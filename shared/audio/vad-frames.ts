import { loadFvad, type FvadModule } from "./fvad";

/**
 * WebRTC VAD decisions for a whole clip at once (the diarizer's speech regions), beside
 * the realtime segmenter (vad.ts), which classifies a session's frames as they come: the
 * same WASM module (libfvad, fvad.ts), with a frame buffer of its own.
 */
export const VAD_FRAME_SECONDS = 0.03;
const FRAME_SAMPLES = 480; // 30 ms at 16 kHz


/**
 * One clip's classifier at `aggressiveness` (0..3): `classify` takes the clip's PCM in
 * order, piece after piece (each a multiple of 30 ms but the last), and keeps the VAD's
 * state between them, so pieces classify as the whole clip would; `free` releases it.
 */
export interface FrameClassifier {
  classify(pcm: Int16Array): Uint8Array;
  free(): void;
}

let loaded: Promise<FvadModule> | undefined;
let frame = 0;

export async function createFrameClassifier(aggressiveness: number): Promise<FrameClassifier> {
  loaded ??= loadFvad().then((m) => {
    frame = m._malloc(FRAME_SAMPLES * 2);
    return m;
  });
  const m = await loaded;
  const handle = m._fvad_new();
  if (!handle) throw new Error("fvad_new failed");
  m._fvad_set_sample_rate(handle, 16_000);
  m._fvad_set_mode(handle, aggressiveness);
  return {
    classify(pcm) {
      const out = new Uint8Array(Math.floor(pcm.length / FRAME_SAMPLES));
      for (let f = 0; f < out.length; f++) {
        m.HEAP16.set(pcm.subarray(f * FRAME_SAMPLES, (f + 1) * FRAME_SAMPLES), frame >> 1);
        out[f] = m._fvad_process(handle, frame, FRAME_SAMPLES) === 1 ? 1 : 0;
      }
      return out;
    },
    free: () => m._fvad_free(handle),
  };
}
