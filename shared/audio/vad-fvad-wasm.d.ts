// @echogarden/fvad-wasm ships no types: an Emscripten module factory.
declare module "@echogarden/fvad-wasm" {
  const createModule: (options?: Record<string, unknown>) => Promise<unknown>;
  export default createModule;
}
