import createFvadModule from "@echogarden/fvad-wasm";

/** libfvad (the WebRTC VAD) compiled to WASM: the calls the service makes. */
export interface FvadModule {
  _fvad_new(): number;
  _fvad_free(handle: number): void;
  _fvad_set_mode(handle: number, mode: number): number;
  _fvad_set_sample_rate(handle: number, rate: number): number;
  _fvad_process(handle: number, frame: number, length: number): number;
  _malloc(bytes: number): number;
  HEAP16: Int16Array;
}

let loaded: Promise<FvadModule> | undefined;

/**
 * The module, loaded once per process for the realtime segmenter (vad.ts) and the
 * whole-clip classifier (vad-frames.ts); each mallocs its own frame buffer and VAD
 * handles, and calls are synchronous, so they never see each other's state.
 */
export function loadFvad(): Promise<FvadModule> {
  loaded ??= (createFvadModule as unknown as () => Promise<FvadModule>)();
  return loaded;
}
