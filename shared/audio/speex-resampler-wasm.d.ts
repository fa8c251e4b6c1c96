// @echogarden/speex-resampler-wasm ships no types: an Emscripten module factory.
declare module "@echogarden/speex-resampler-wasm/simd" {
  const createModule: (options?: Record<string, unknown>) => Promise<unknown>;
  export default createModule;
}
