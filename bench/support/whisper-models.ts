import { existsSync, mkdirSync, renameSync } from "node:fs";
import { join, resolve } from "node:path";
import { WHISPER_SHAPES, writeTinyWhisperModel, type WhisperShape } from "../../test/support/workers-whisper-model";

const root = resolve(import.meta.dirname, "../..");

/** The released shape with the text context that stops a window at `tokens` tokens. */
function benchShape(name: keyof typeof WHISPER_SHAPES, tokensPerWindow: number): WhisperShape {
  return { ...WHISPER_SHAPES[name], textCtx: 2 * (tokensPerWindow + 4) };
}

/** The generated model for a shape, written once under .data/bench-models/. */
export async function benchModel(name: keyof typeof WHISPER_SHAPES, tokensPerWindow: number): Promise<string> {
  const dir = join(root, ".data", "bench-models");
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `ggml-${name}-random-t${tokensPerWindow}.bin`);
  if (existsSync(path)) return path;
  // written aside and renamed: a bench stopped mid-write leaves no half a model behind
  await writeTinyWhisperModel(`${path}.part`, { shape: benchShape(name, tokensPerWindow), multilingual: name === "large-v3-turbo" });
  renameSync(`${path}.part`, path);
  return path;
}

