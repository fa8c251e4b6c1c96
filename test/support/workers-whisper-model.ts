import { open } from "node:fs/promises";

/**
 * Writes a tiny whisper.cpp ggml model with random weights, for loading and plumbing
 * tests of the whisper.cpp worker: the same file layout whisper.cpp's
 * convert-pt-to-ggml.py writes (magic, hyper-parameters, mel filters, vocabulary,
 * then every tensor by name), at a toy size (1 layer, width 64). whisper.cpp's own
 * test model (models/for-tests-ggml-tiny.bin) cannot be fetched on these machines,
 * and no weights are ever downloaded by the service; this one is generated.
 *
 * Its transcripts are noise, but everything around them is real: the native binding
 * loads it, runs the encoder and decoder on our PCM, and returns timed tokens.
 */
export interface TinyWhisperModel {
  path: string;
  bytes: number;
}

export async function writeTinyWhisperModel(path: string, seed = 42): Promise<TinyWhisperModel> {
  const h = {
    n_vocab: 51864, // English-only layout: < 51865
    n_audio_ctx: 1500,
    n_audio_state: 64,
    n_audio_head: 2,
    n_audio_layer: 1,
    n_text_ctx: 448,
    n_text_state: 64,
    n_text_head: 2,
    n_text_layer: 1,
    n_mels: 80,
    ftype: 0, // f32
  };
  let state = seed >>> 0;
  const rand = () => {
    // xorshift32 → roughly normal via the sum of uniforms
    let s = 0;
    for (let i = 0; i < 4; i++) {
      state ^= state << 13;
      state ^= state >>> 17;
      state ^= state << 5;
      s += (state >>> 0) / 0xffffffff;
    }
    return (s - 2) * 0.05;
  };
  const file = await open(path, "w");
  let bytes = 0;
  const write = async (buf: Buffer) => {
    await file.write(buf);
    bytes += buf.length;
  };
  const i32 = (...xs: number[]) => {
    const b = Buffer.alloc(4 * xs.length);
    xs.forEach((x, i) => b.writeInt32LE(x, 4 * i));
    return b;
  };
  try {
    await write(i32(0x67676d6c));
    await write(i32(h.n_vocab, h.n_audio_ctx, h.n_audio_state, h.n_audio_head, h.n_audio_layer, h.n_text_ctx, h.n_text_state, h.n_text_head, h.n_text_layer, h.n_mels, h.ftype));
    // mel filters: n_mel × n_fft triangular-ish bands
    const nFft = 201;
    const filters = Buffer.alloc(4 * h.n_mels * nFft);
    for (let m = 0; m < h.n_mels; m++) {
      const centre = Math.round(((m + 1) * (nFft - 1)) / (h.n_mels + 1));
      for (let k = Math.max(0, centre - 2); k <= Math.min(nFft - 1, centre + 2); k++) filters.writeFloatLE(1 - Math.abs(k - centre) / 3, 4 * (m * nFft + k));
    }
    await write(i32(h.n_mels, nFft));
    await write(filters);
    // vocabulary: the 256 byte tokens (GPT-2 style printable bytes); whisper.cpp names the rest
    const words: Buffer[] = [];
    for (let i = 0; i < 256; i++) words.push(Buffer.from(i >= 33 && i <= 126 ? String.fromCharCode(i) : i === 32 ? " " : `<${i}>`, "latin1"));
    await write(i32(words.length));
    for (const w of words) {
      await write(i32(w.length));
      await write(w);
    }
    const tensor = async (name: string, ne: number[], kind: "weight" | "ones" | "zeros" = "weight") => {
      const n = ne.reduce((a, b) => a * b, 1);
      const data = Buffer.alloc(4 * n);
      for (let i = 0; i < n; i++) data.writeFloatLE(kind === "ones" ? 1 : kind === "zeros" ? 0 : rand(), 4 * i);
      const nameBuf = Buffer.from(name, "utf8");
      await write(i32(ne.length, nameBuf.length, 0, ...ne));
      await write(nameBuf);
      await write(data);
    };
    const A = h.n_audio_state;
    const T = h.n_text_state;
    await tensor("encoder.positional_embedding", [A, h.n_audio_ctx]);
    await tensor("encoder.conv1.weight", [3, h.n_mels, A]);
    await tensor("encoder.conv1.bias", [1, A], "zeros");
    await tensor("encoder.conv2.weight", [3, A, A]);
    await tensor("encoder.conv2.bias", [1, A], "zeros");
    await tensor("encoder.ln_post.weight", [A], "ones");
    await tensor("encoder.ln_post.bias", [A], "zeros");
    const block = async (p: string, n: number, cross: boolean) => {
      await tensor(`${p}.mlp_ln.weight`, [n], "ones");
      await tensor(`${p}.mlp_ln.bias`, [n], "zeros");
      await tensor(`${p}.mlp.0.weight`, [n, 4 * n]);
      await tensor(`${p}.mlp.0.bias`, [4 * n], "zeros");
      await tensor(`${p}.mlp.2.weight`, [4 * n, n]);
      await tensor(`${p}.mlp.2.bias`, [n], "zeros");
      for (const a of cross ? ["attn", "cross_attn"] : ["attn"]) {
        await tensor(`${p}.${a}_ln.weight`, [n], "ones");
        await tensor(`${p}.${a}_ln.bias`, [n], "zeros");
        await tensor(`${p}.${a}.query.weight`, [n, n]);
        await tensor(`${p}.${a}.query.bias`, [n], "zeros");
        await tensor(`${p}.${a}.key.weight`, [n, n]);
        await tensor(`${p}.${a}.value.weight`, [n, n]);
        await tensor(`${p}.${a}.value.bias`, [n], "zeros");
        await tensor(`${p}.${a}.out.weight`, [n, n]);
        await tensor(`${p}.${a}.out.bias`, [n], "zeros");
      }
    };
    for (let i = 0; i < h.n_audio_layer; i++) await block(`encoder.blocks.${i}`, A, false);
    await tensor("decoder.positional_embedding", [T, h.n_text_ctx]);
    await tensor("decoder.token_embedding.weight", [T, h.n_vocab]);
    await tensor("decoder.ln.weight", [T], "ones");
    await tensor("decoder.ln.bias", [T], "zeros");
    for (let i = 0; i < h.n_text_layer; i++) await block(`decoder.blocks.${i}`, T, true);
  } finally {
    await file.close();
  }
  return { path, bytes };
}
