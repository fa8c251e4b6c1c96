import createFvadModule from "@echogarden/fvad-wasm";

/**
 * WebRTC VAD decisions for a whole clip at once (the diarizer's speech regions), beside
 * the realtime segmenter (vad.ts), which classifies a session's frames as they come. Its
 * own instance of the same WASM module (libfvad), loaded once per process on first use.
 */
export const VAD_FRAME_SECONDS = 0.03;
const FRAME_SAMPLES = 480; // 30 ms at 16 kHz

interface FvadModule {
  _fvad_new(): number;
  _fvad_free(handle: number): void;
  _fvad_set_mode(handle: number, mode: number): number;
  _fvad_set_sample_rate(handle: number, rate: number): number;
  _fvad_process(handle: number, frame: number, length: number): number;
  _malloc(bytes: number): number;
  HEAP16: Int16Array;
}

/** Classifies 16 kHz mono PCM16 in 30 ms frames at `aggressiveness` (0..3): 1 where voiced. */
export type ClassifyFrames = (pcm: Int16Array, aggressiveness: number) => Uint8Array;

let loaded: Promise<ClassifyFrames> | undefined;

export function loadFrameClassifier(): Promise<ClassifyFrames> {
  loaded ??= (createFvadModule as unknown as () => Promise<FvadModule>)().then((m) => {
    const frame = m._malloc(FRAME_SAMPLES * 2);
    return (pcm, aggressiveness) => {
      const handle = m._fvad_new();
      if (!handle) throw new Error("fvad_new failed");
      try {
        m._fvad_set_sample_rate(handle, 16_000);
        m._fvad_set_mode(handle, aggressiveness);
        const out = new Uint8Array(Math.floor(pcm.length / FRAME_SAMPLES));
        for (let f = 0; f < out.length; f++) {
          m.HEAP16.set(pcm.subarray(f * FRAME_SAMPLES, (f + 1) * FRAME_SAMPLES), frame >> 1);
          out[f] = m._fvad_process(handle, frame, FRAME_SAMPLES) === 1 ? 1 : 0;
        }
        return out;
      } finally {
        m._fvad_free(handle);
      }
    };
  });
  return loaded;
}
