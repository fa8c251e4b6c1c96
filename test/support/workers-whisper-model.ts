import { open } from "node:fs/promises";

/**
 * Writes a tiny whisper.cpp model with deterministic pseudo-random weights, so the
 * tests run the whisper.cpp engine end to end on every machine: no weights are ever
 * downloaded here, and none are committed.
 *
 * The file is whisper.cpp's legacy ggml layout, what its models/convert-pt-to-ggml.py
 * writes and `whisper_model_load` (src/whisper.cpp) reads:
 *
 *   magic 0x67676d6c · hyper-parameters (11 × i32: n_vocab, n_audio_ctx, n_audio_state,
 *   n_audio_head, n_audio_layer, n_text_ctx, n_text_state, n_text_head, n_text_layer,
 *   n_mels, ftype) · mel filters (i32 n_mel, i32 n_fft, n_mel × n_fft f32) · the text
 *   vocabulary (i32 count, then per token i32 length + bytes) · every tensor
 *   (i32 n_dims, i32 name length, i32 type, n_dims × i32 dims innermost first, the name,
 *   the data), by the names and shapes whisper.cpp creates.
 *
 * What is real: the vocabulary size and so every special token id (whisper.cpp derives
 * end-of-text, start-of-transcript, the 99 language tokens, the task tokens and the
 * 1501 timestamp tokens from n_vocab: 51864 English-only, 51865 multilingual), the
 * 30 s window (n_audio_ctx 1500: 3000 mel frames after the stride-2 conv), the 80 mel
 * bands, the conv shapes, GPT-2's 256 byte tokens in their places (" " is 220).
 * What is toy: one encoder and one decoder layer of width 16, a 32-token text context
 * (so a window decodes at most 32 / 2 − 4 = 12 tokens), and the other ~50 000 text
 * tokens: made-up ASCII syllables (about 70% start a word, a few end a sentence)
 * instead of the BPE merges, so transcripts are nonsense words, but whisper emits
 * words, token timestamps and sentences from them as from a trained model.
 * Matrices are f16 and the rest f32 (ftype 1), as the converter writes them: about 2 MB in all,
 * most of it the token embedding.
 */
export interface TinyWhisperModelOptions {
  /** 51865 tokens (language detection runs) instead of the English-only 51864. */
  multilingual?: boolean;
  /** Another seed, other weights and vocabulary (3 gives several words on jfk.wav and ldc93s1.wav). */
  seed?: number;
  /**
   * A released model's architecture instead of the toy one (WHISPER_SHAPES), with f16
   * weights where the converter writes them: what the capacity and cost benches decode
   * on, since compute depends on the shapes and not on the weights' values.
   */
  shape?: WhisperShape;
}

/** The architecture of a whisper model: what its compute depends on. */
export interface WhisperShape {
  width: number;
  heads: number;
  audioLayers: number;
  textLayers: number;
  /** Text context (448 in every released model): a window decodes at most textCtx / 2 − 4 tokens. */
  textCtx: number;
  mels: number;
}

/** The released models' shapes (OpenAI's whisper/__init__.py model dimensions). */
export const WHISPER_SHAPES = {
  tiny: { width: 384, heads: 6, audioLayers: 4, textLayers: 4, textCtx: 448, mels: 80 },
  base: { width: 512, heads: 8, audioLayers: 6, textLayers: 6, textCtx: 448, mels: 80 },
  small: { width: 768, heads: 12, audioLayers: 12, textLayers: 12, textCtx: 448, mels: 80 },
  "large-v3-turbo": { width: 1280, heads: 20, audioLayers: 32, textLayers: 4, textCtx: 448, mels: 128 },
} satisfies Record<string, WhisperShape>;

export interface TinyWhisperModel {
  path: string;
  bytes: number;
  nVocab: number;
  /** Offset where the tensors start (after the vocabulary): a file cut there has no weights. */
  tensorsOffset: number;
}

const WIDTH = 16;
const TEXT_CTX = 32;
/** whisper.cpp decodes at most n_text_ctx / 2 − 4 tokens per 30 s window: 12 with this model. */
export const TINY_TOKENS_PER_WINDOW = TEXT_CTX / 2 - 4;
/**
 * The token embedding (also the output projection) is 30× wider than the other weights
 * (sd ≈ 0.9): with it as small as the rest, every logit is near zero, the 1501 timestamp
 * tokens together outweigh any one text token, and whisper.cpp's timestamp rule lets
 * through a single word per 30 s window. Peaked logits give several words per window,
 * and sometimes whisper's familiar degenerate loop (one word repeated to the window's
 * token limit), which the tests want to meet too.
 */
const EMBEDDING_SCALE = 30;

export async function writeTinyWhisperModel(path: string, options: TinyWhisperModelOptions = {}): Promise<TinyWhisperModel> {
  const multilingual = options.multilingual ?? false;
  const shape = options.shape;
  const h = {
    // large-v3 (and turbo) add a language token: 51866
    n_vocab: (multilingual ? 51865 : 51864) + (shape?.mels === 128 ? 1 : 0),
    n_audio_ctx: 1500,
    n_audio_state: shape?.width ?? WIDTH,
    n_audio_head: shape?.heads ?? 2,
    n_audio_layer: shape?.audioLayers ?? 1,
    n_text_ctx: shape?.textCtx ?? TEXT_CTX,
    // whisper.cpp's cross-attention needs the same width on both sides
    n_text_state: shape?.width ?? WIDTH,
    n_text_head: shape?.heads ?? 2,
    n_text_layer: shape?.textLayers ?? 1,
    n_mels: shape?.mels ?? 80,
    // f16, as the released files are (whisper.cpp 1.9's convolution wants f16 kernels)
    ftype: 1,
  };
  // text tokens before the special ones: end-of-text is 50256 (English) or 50257
  const textTokens = multilingual ? 50257 : 50256;
  const next = xorshift(options.seed ?? 3);
  const file = await open(path, "w");
  let bytes = 0;
  let tensorsOffset = 0;
  const write = async (buf: Buffer) => {
    await file.write(buf);
    bytes += buf.length;
  };
  try {
    await write(i32(0x67676d6c, h.n_vocab, h.n_audio_ctx, h.n_audio_state, h.n_audio_head, h.n_audio_layer, h.n_text_ctx, h.n_text_state, h.n_text_head, h.n_text_layer, h.n_mels, h.ftype));
    await write(i32(h.n_mels, 201));
    await write(melFilters(h.n_mels, 201));
    await write(vocabulary(textTokens, next));
    tensorsOffset = bytes;
    for (const t of tensorList(h)) await write(tensor(t, next, h.ftype === 1 && halfInFile(t)));
  } finally {
    await file.close();
  }
  return { path, bytes, nVocab: h.n_vocab, tensorsOffset };
}

type Fill = "random" | "ones" | "zeros" | "embedding";
interface TensorSpec {
  name: string;
  /** innermost first, as ggml's ne[] */
  ne: number[];
  fill: Fill;
}

/** The tensors whisper.cpp's loader creates (ASR_TENSOR_NAMES), in the converter's order. */
function tensorList(h: { n_audio_state: number; n_audio_ctx: number; n_mels: number; n_audio_layer: number; n_text_state: number; n_text_ctx: number; n_vocab: number; n_text_layer: number }): TensorSpec[] {
  const A = h.n_audio_state;
  const T = h.n_text_state;
  const list: TensorSpec[] = [];
  const add = (name: string, ne: number[], fill: Fill = "random") => list.push({ name, ne, fill });
  const block = (p: string, n: number, cross: boolean) => {
    add(`${p}.mlp_ln.weight`, [n], "ones");
    add(`${p}.mlp_ln.bias`, [n], "zeros");
    add(`${p}.mlp.0.weight`, [n, 4 * n]);
    add(`${p}.mlp.0.bias`, [4 * n], "zeros");
    add(`${p}.mlp.2.weight`, [4 * n, n]);
    add(`${p}.mlp.2.bias`, [n], "zeros");
    for (const a of cross ? ["attn", "cross_attn"] : ["attn"]) {
      add(`${p}.${a}_ln.weight`, [n], "ones");
      add(`${p}.${a}_ln.bias`, [n], "zeros");
      add(`${p}.${a}.query.weight`, [n, n]);
      add(`${p}.${a}.query.bias`, [n], "zeros");
      add(`${p}.${a}.key.weight`, [n, n]);
      add(`${p}.${a}.value.weight`, [n, n]);
      add(`${p}.${a}.value.bias`, [n], "zeros");
      add(`${p}.${a}.out.weight`, [n, n]);
      add(`${p}.${a}.out.bias`, [n], "zeros");
    }
  };
  add("encoder.positional_embedding", [A, h.n_audio_ctx]);
  add("encoder.conv1.weight", [3, h.n_mels, A]);
  add("encoder.conv1.bias", [1, A], "zeros");
  add("encoder.conv2.weight", [3, A, A]);
  add("encoder.conv2.bias", [1, A], "zeros");
  add("encoder.ln_post.weight", [A], "ones");
  add("encoder.ln_post.bias", [A], "zeros");
  for (let i = 0; i < h.n_audio_layer; i++) block(`encoder.blocks.${i}`, A, false);
  add("decoder.positional_embedding", [T, h.n_text_ctx]);
  add("decoder.token_embedding.weight", [T, h.n_vocab], "embedding");
  add("decoder.ln.weight", [T], "ones");
  add("decoder.ln.bias", [T], "zeros");
  for (let i = 0; i < h.n_text_layer; i++) block(`decoder.blocks.${i}`, T, true);
  return list;
}

/** What the converter (models/convert-pt-to-ggml.py) writes in f16 in an f16 model: matrices, but not the positional embeddings. */
function halfInFile(t: TensorSpec): boolean {
  return t.ne.length >= 2 && !t.name.endsWith("positional_embedding") && !t.name.endsWith(".bias");
}

/** Random values repeat with this period in a big tensor (compute does not depend on them; generating 800 M would take minutes). */
const TILE = 1 << 20;

function tensor(t: TensorSpec, next: () => number, half: boolean): Buffer {
  const name = Buffer.from(t.name, "utf8");
  const n = t.ne.reduce((a, b) => a * b, 1);
  const data = Buffer.alloc((half ? 2 : 4) * n);
  const scale = t.fill === "embedding" ? EMBEDDING_SCALE : 1;
  if (t.fill !== "zeros") {
    const distinct = Math.min(n, TILE);
    for (let i = 0; i < distinct; i++) {
      const v = t.fill === "ones" ? 1 : normalish(next) * scale;
      if (half) data.writeUInt16LE(toHalf(v), 2 * i);
      else data.writeFloatLE(v, 4 * i);
    }
    const bytes = distinct * (half ? 2 : 4);
    for (let at = bytes; at < data.length; at += bytes) data.copy(data, at, 0, Math.min(bytes, data.length - at));
  }
  return Buffer.concat([i32(t.ne.length, name.length, half ? 1 : 0, ...t.ne), name, data]);
}

/** IEEE 754 half precision of a small value (|v| < 65504; no NaN or infinity here). */
function toHalf(v: number): number {
  const f = new Float32Array([v]);
  const x = new Uint32Array(f.buffer)[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = ((x >>> 23) & 0xff) - 127 + 15;
  if (exp <= 0) return sign; // below half's normal range: zero
  return sign | (exp << 10) | ((x >>> 13) & 0x3ff);
}

/** Triangular bands over the 201 FFT bins of whisper's 400-sample window. */
function melFilters(nMel: number, nFft: number): Buffer {
  const out = Buffer.alloc(4 * nMel * nFft);
  for (let m = 0; m < nMel; m++) {
    const centre = Math.round(((m + 1) * (nFft - 1)) / (nMel + 1));
    for (let k = Math.max(0, centre - 2); k <= Math.min(nFft - 1, centre + 2); k++) out.writeFloatLE(1 - Math.abs(k - centre) / 3, 4 * (m * nFft + k));
  }
  return out;
}

const ONSETS = ["", "b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "st", "tr"];
const NUCLEI = ["a", "e", "i", "o", "u", "ai", "ou"];

/**
 * GPT-2's 256 byte tokens first, in its order (the printable bytes, then the rest, so
 * " " is token 220: whisper.cpp looks it up by text to suppress a blank start, and
 * throws without it), then made-up ASCII tokens up to `count`: one to three syllables, most
 * with a leading space (a new word), a few ending a sentence.
 */
function vocabulary(count: number, next: () => number): Buffer {
  const printable = (b: number) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  const bytes = [...Array(256).keys()];
  const tokens: Buffer[] = [...bytes.filter(printable), ...bytes.filter((b) => !printable(b))].map((b) => Buffer.from([b]));
  const seen = new Set<string>(tokens.map((t) => t.toString("latin1")));
  while (tokens.length < count) {
    let token = next() % 10 < 7 ? " " : "";
    const syllables = 1 + (next() % 3);
    for (let s = 0; s < syllables; s++) token += ONSETS[next() % ONSETS.length]! + NUCLEI[next() % NUCLEI.length]!;
    const end = next() % 40;
    if (end === 0) token += ".";
    else if (end === 1) token += ",";
    else if (end === 2) token += "?";
    if (seen.has(token)) continue;
    seen.add(token);
    tokens.push(Buffer.from(token, "ascii"));
  }
  return Buffer.concat([i32(count), ...tokens.flatMap((t) => [i32(t.length), t])]);
}

function xorshift(seed: number): () => number {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return state >>> 0;
  };
}

/** Roughly normal, mean 0, sd ≈ 0.03 (the sum of four uniforms). */
function normalish(next: () => number): number {
  let s = 0;
  for (let i = 0; i < 4; i++) s += next() / 0xffffffff;
  return (s - 2) * 0.05;
}

function i32(...xs: number[]): Buffer {
  const b = Buffer.alloc(4 * xs.length);
  xs.forEach((x, i) => b.writeInt32LE(x, 4 * i));
  return b;
}
