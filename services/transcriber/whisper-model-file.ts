import { open, type FileHandle } from "node:fs/promises";
import { AppError } from "../../shared/errors";

/**
 * Checks a whisper.cpp model file before the binding sees it. whisper.cpp's loader
 * (`whisper_model_load`) reads the legacy ggml layout without bounds checks: a file cut
 * short inside its mel filters or vocabulary "loads" as an empty model (it logs "no
 * tensors loaded - assuming empty model for testing"), and every clip sent to it then
 * hangs (seen with @fugood/node-whisper 1.1.3: the promise never settles). So the file
 * is walked here first, header by header, and refused with a message that says what is
 * wrong instead.
 *
 * Layout (whisper.cpp's models/convert-pt-to-ggml.py): magic 0x67676d6c; 11 × i32
 * hyper-parameters; mel filters (i32 n_mel, i32 n_fft, n_mel × n_fft f32); vocabulary
 * (i32 count, then i32 length + bytes per token); tensors to the end of the file
 * (i32 n_dims, i32 name length, i32 ggml type, n_dims × i32 dims, name, data).
 */
export interface WhisperModelInfo {
  nVocab: number;
  /** Encoder positions of the full 30 s window (1500 in the released models). */
  nAudioCtx: number;
  /** 51865 tokens or more: language detection and the language tokens exist. */
  multilingual: boolean;
  /** The language codes the model knows, in whisper.cpp's order (99, or 100 from large-v3). */
  languages: string[];
  tensors: number;
}

const GGML_MAGIC = 0x67676d6c;
/** whisper.cpp's g_lang, in token order; "yue" only exists in large-v3's 100. */
const WHISPER_LANGUAGES = ("en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg lt la mi ml cy sk te fa lv bn sr az sl kn et " +
  "mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af oc ka be tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su yue").split(" ");
/** ggml type id → [elements per block, bytes per block], for the types whisper models ship in. */
const GGML_TYPES = new Map<number, [number, number]>([
  [0, [1, 4]], // f32
  [1, [1, 2]], // f16
  [2, [32, 18]], // q4_0
  [3, [32, 20]], // q4_1
  [6, [32, 22]], // q5_0
  [7, [32, 24]], // q5_1
  [8, [32, 34]], // q8_0
  [10, [256, 84]], // q2_k
  [11, [256, 110]], // q3_k
  [12, [256, 144]], // q4_k
  [13, [256, 176]], // q5_k
  [14, [256, 210]], // q6_k
]);

export async function checkWhisperModelFile(path: string): Promise<WhisperModelInfo> {
  const file = await open(path, "r");
  try {
    return await walk(fileReader(file, (await file.stat()).size), path);
  } finally {
    await file.close();
  }
}

async function walk(r: Reader, path: string): Promise<WhisperModelInfo> {
  const refuse = (why: string): never => {
    throw new AppError("validation", "whisper_model_invalid", `WHISPER_MODEL_PATH ${path} is not a usable whisper.cpp ggml model: ${why}`);
  };
  if (((await r.i32s(1))?.[0] ?? 0) >>> 0 !== GGML_MAGIC) {
    return refuse("it does not start with the ggml magic 0x67676d6c (whisper.cpp reads ggml-*.bin files as its convert scripts write them, not GGUF, PyTorch or safetensors)");
  }
  const hp = await r.i32s(11);
  if (!hp) return refuse(`the file ends at byte ${r.size}, inside its hyper-parameters`);
  const [nVocab, nAudioCtx, nAudioState, nAudioHead, nAudioLayer, nTextCtx, nTextState, nTextHead, nTextLayer, nMels] = hp as [number, number, number, number, number, number, number, number, number, number];
  if ([nAudioCtx, nAudioState, nAudioHead, nAudioLayer, nTextCtx, nTextState, nTextHead, nTextLayer, nMels].some((v) => v <= 0)) {
    return refuse(`its hyper-parameters are not all positive (${hp.join(", ")})`);
  }
  // whisper.cpp derives end-of-text, the language, task and timestamp tokens from n_vocab
  if (nVocab < 51864) return refuse(`n_vocab is ${nVocab}; whisper's vocabulary has 51864 tokens (English-only) or more`);
  if (nAudioState !== nTextState) return refuse(`n_audio_state ${nAudioState} and n_text_state ${nTextState} differ`);
  const mel = await r.i32s(2);
  if (!mel || mel[0]! <= 0 || mel[1]! <= 0 || !(await r.skip(4 * mel[0]! * mel[1]!))) return refuse(`the file ends at byte ${r.size}, inside its mel filters`);
  const [count] = (await r.i32s(1)) ?? [-1];
  if (count! < 0 || count! > nVocab) return refuse(count! < 0 ? `the file ends at byte ${r.size}, before its vocabulary` : `its vocabulary holds ${count} tokens, more than n_vocab ${nVocab}`);
  let hasSpace = false;
  for (let i = 0; i < count!; i++) {
    const [len] = (await r.i32s(1)) ?? [-1];
    if (len! < 0 || len! > 1024) return refuse(len! < 0 ? `the file ends at byte ${r.size}, inside its vocabulary (token ${i} of ${count})` : `token ${i} of its vocabulary claims ${len} bytes`);
    const token = await r.bytes(len!);
    if (!token) return refuse(`the file ends at byte ${r.size}, inside its vocabulary (token ${i} of ${count})`);
    if (len === 1 && token[0] === 0x20) hasSpace = true;
  }
  // whisper.cpp looks " " up by text to suppress a blank first token; without it every decode throws
  if (!hasSpace) return refuse('its vocabulary has no " " token');
  const expected = 7 + 15 * nAudioLayer + 4 + 24 * nTextLayer;
  let tensors = 0;
  while (r.offset < r.size) {
    const head = await r.i32s(3);
    if (!head) return refuse(`the file ends at byte ${r.size}, inside the header of tensor ${tensors + 1} of ${expected}`);
    const [nDims, nameLength, type] = head as [number, number, number];
    if (nDims < 1 || nDims > 4 || nameLength < 1 || nameLength > 1024) return refuse(`tensor ${tensors + 1} has a malformed header at byte ${r.offset - 12}`);
    const dims = await r.i32s(nDims);
    const name = dims && (await r.bytes(nameLength))?.toString("utf8");
    if (!dims || name === undefined) return refuse(`the file ends at byte ${r.size}, inside the header of tensor ${tensors + 1} of ${expected}`);
    const elements = dims.reduce((a, b) => a * b, 1);
    const layout = GGML_TYPES.get(type);
    // A type this check does not know: whisper.cpp checks the rest itself.
    if (!layout) return { nVocab, nAudioCtx, multilingual: nVocab >= 51865, languages: languagesOf(nVocab), tensors };
    const dataBytes = (elements / layout[0]) * layout[1];
    if (!(await r.skip(dataBytes))) return refuse(`the file ends at byte ${r.size}, inside tensor '${name}' (${tensors + 1} of ${expected}; ${dataBytes} bytes of data): the file is truncated`);
    tensors++;
  }
  if (tensors === 0) return refuse("it holds no tensors (whisper.cpp would load it as an empty model)");
  if (tensors !== expected) return refuse(`it holds ${tensors} tensors; ${nAudioLayer} encoder and ${nTextLayer} decoder layers need ${expected}`);
  return { nVocab, nAudioCtx, multilingual: nVocab >= 51865, languages: languagesOf(nVocab), tensors };
}

/** whisper.cpp: num_languages = n_vocab − 51765 − (multilingual ? 1 : 0); English-only knows "en". */
function languagesOf(nVocab: number): string[] {
  if (nVocab < 51865) return ["en"];
  return WHISPER_LANGUAGES.slice(0, Math.min(WHISPER_LANGUAGES.length, nVocab - 51766));
}

interface Reader {
  readonly size: number;
  readonly offset: number;
  /** The next `n` bytes; `undefined` when the file ends first. */
  bytes(n: number): Promise<Buffer | undefined>;
  i32s(n: number): Promise<number[] | undefined>;
  /** Moves past `n` bytes; false when the file is shorter. */
  skip(n: number): Promise<boolean>;
}

/** Sequential reads through a file in 64 KiB pieces. */
function fileReader(file: FileHandle, size: number): Reader {
  let offset = 0;
  let buf = Buffer.alloc(0);
  let bufStart = 0;
  const bytes = async (n: number) => {
    if (offset + n > size) return undefined;
    if (offset < bufStart || offset + n > bufStart + buf.length) {
      buf = Buffer.alloc(Math.max(n, 64 * 1024));
      const { bytesRead } = await file.read(buf, 0, buf.length, offset);
      buf = buf.subarray(0, bytesRead);
      bufStart = offset;
    }
    const at = offset - bufStart;
    offset += n;
    return buf.subarray(at, at + n);
  };
  return {
    size,
    get offset() {
      return offset;
    },
    bytes,
    async i32s(n) {
      const b = await bytes(4 * n);
      return b && Array.from({ length: n }, (_, i) => b.readInt32LE(4 * i));
    },
    async skip(n) {
      if (!Number.isFinite(n) || n < 0 || offset + n > size) return false;
      offset += n;
      return true;
    },
  };
}
