/**
 * Offline twin of bench/realtime-wer.ts's per-clip grouping, without services:
 * `npx tsx bench/realtime-wer-offline.ts`. Each labelled clip (+1.5 s of silence) is cut
 * into utterances by the server VAD's segmenter with the default turn detection, as the
 * plane cuts it; each utterance then goes (a) the commit path (the whole utterance to a
 * ps-worker, as the rt-transcriber sends it) and (b) a streaming decoder (fed in 30 ms
 * pieces, the session's CMN carried from its previous utterance, as the VAD feeds it).
 * Deterministic: it reproduces the plane's per-clip figures word for word, in a minute.
 * It also prints the streaming decoder's CPU per audio second (its end-of-utterance time
 * here includes decoding the whole utterance: the audio is fed at once, not paced).
 *
 *   OPTS='["-opt","value",…]'         the streaming decoder's options (default STREAM_DECODER_OPTIONS)
 *   COMMIT_OPTS='["-opt","value",…]'  the commit path's options (default: the worker's)
 *   SKIP_COMMIT=1                     only the streamed side
 */
import { createPocketsphinxEngine } from "../services/transcriber/pocketsphinx/engine";
import { createStreamDecoderPool, type StreamResult, type StreamUtterance } from "../services/vad/stream-decoders";
import { loadVadEngine } from "../shared/audio/vad";
import { defaultTurnDetection } from "../schemas/realtime";
import { labelledClips } from "./support/clips";
import { childPids, cpuSeconds } from "./support/proc";
import { wordErrorRate } from "../shared/workers/wer";

const opts: string[] | undefined = process.env.OPTS ? JSON.parse(process.env.OPTS) : undefined;
const clips = await labelledClips();
const vad = await loadVadEngine();
const cut = (pcm: Int16Array) => {
  const seg = vad.createSegmenter(defaultTurnDetection);
  const all = new Int16Array(pcm.length + 24000);
  all.set(pcm);
  const utts: Int16Array[] = [];
  for (let i = 0; i < all.length; i += 480) for (const e of seg.push(all.subarray(i, i + 480))) if (e.kind === "utterance") utts.push(e.pcm);
  for (const e of seg.commit("close")) if (e.kind === "utterance") utts.push(e.pcm);
  seg.close();
  return utts;
};
const engine = process.env.SKIP_COMMIT ? null : await createPocketsphinxEngine({ processes: 1, decoderOptions: process.env.COMMIT_OPTS ? JSON.parse(process.env.COMMIT_OPTS) : undefined });
const before = new Set(childPids());
const pool = await createStreamDecoderPool({ size: 1, warm: 1, decoderOptions: opts });
await new Promise((r) => setTimeout(r, 2000));
const decoderPid = childPids().find((p) => !before.has(p));
const cpu0 = decoderPid ? cpuSeconds(decoderPid) : 0;
let audioSeconds = 0;
const ends: number[] = [];
let ce = 0, se = 0, words = 0;
for (const c of clips) {
  const utts = cut(c.pcm);
  const commitText: string[] = [];
  const streamText: string[] = [];
  let cmn: number[] | null = null;
  for (const u of utts) {
    if (engine) commitText.push((await engine.transcribe({ pcm: u })).text);
    const d: StreamUtterance = pool.acquire({ prompt: null, cmn })!;
    for (let i = 0; i < u.length; i += 480) d.feed(u.subarray(i, i + 480));
    const t0 = performance.now();
    const r: StreamResult = await d.end();
    ends.push(performance.now() - t0);
    audioSeconds += u.length / 16000;
    cmn = r.cmn;
    streamText.push(r.words.map((w) => w.word).join(" "));
  }
  const a = wordErrorRate(c.ref, commitText.join(" ")), b = wordErrorRate(c.ref, streamText.join(" "));
  ce += a.errors; se += b.errors; words += a.referenceWords;
  console.log(`${c.name}: ${utts.length} utts, commit ${a.errors}, streamed ${b.errors} | ${streamText.join(" | ")}`);
}
console.log(`commit ${ce}/${words} ${(100 * ce / words).toFixed(1)}%, streamed ${se}/${words} ${(100 * se / words).toFixed(1)}%`);
ends.sort((a, b) => a - b);
const cpu = decoderPid ? (cpuSeconds(decoderPid) - cpu0) / audioSeconds : NaN;
// the audio is fed faster than real time, so `end` waits for the whole utterance to be decoded
console.log(`streaming decoder: ${cpu.toFixed(3)} CPU-s per audio second; end (including decoding the utterance, fed at once) p50 ${ends[ends.length >> 1]!.toFixed(0)} ms, max ${ends.at(-1)!.toFixed(0)} ms`);
await pool.close();
await engine?.close();
