/**
 * Streaming-decoder benchmark: `npx tsx bench/stream-decoder.ts` (no services needed).
 *
 * On the labelled clips (LibriVox from pocketsphinx-testdata, jfk, ldc93s1) it compares
 * the commit path's whole-clip request (ps-worker PSS1: clip CMN, PocketSphinx VAD
 * splitting, second pass) with the streaming protocol (PSS2: 20 ms chunks, one
 * utterance, CMN warmed up on the utterance's first 0.8 s, or with BENCH_CARRY_CMN=1 carried
 * from the previous clip as a session's next utterance is), each with the second pass on
 * and off: word error rate, engine CPU seconds per audio second (from /proc, the
 * process's own user+system time), and the time `end` takes.
 */
import { COMMIT_DECODER_OPTIONS, createPocketsphinxEngine } from "../services/transcriber/pocketsphinx/engine";
import { createStreamDecoderPool, type StreamResult, type StreamUtterance } from "../services/vad/stream-decoders";
import { labelledClips } from "./support/clips";
import { childPids, cpuSeconds } from "./support/proc";
import { wordErrorRate } from "../shared/workers/wer";

const SECOND_PASS_OFF = ["-fwdflat", "no", "-bestpath", "no"];


const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Clip = Awaited<ReturnType<typeof labelledClips>>[number];

async function commitPath(clips: Clip[], options: string[]) {
  const before = new Set(childPids());
  const engine = await createPocketsphinxEngine({ processes: 1, decoderOptions: options });
  const pid = childPids().find((p) => !before.has(p))!;
  const cpu0 = cpuSeconds(pid);
  let errors = 0, words = 0;
  for (const c of clips) {
    const r = await engine.transcribe({ pcm: c.pcm });
    const w = wordErrorRate(c.ref, r.text);
    errors += w.errors;
    words += w.referenceWords;
  }
  const cpu = cpuSeconds(pid) - cpu0;
  await engine.close();
  return { errors, words, cpu };
}

async function streamed(clips: Clip[], options: string[], carry = process.env.BENCH_CARRY_CMN === "1") {
  const pool = await createStreamDecoderPool({ size: 1, warm: 1, decoderOptions: options });
  await sleep(2000); // model load
  const ends: number[] = [];
  let errors = 0, words = 0, cpu = 0;
  let cmn: number[] | null = null;
  for (const c of clips) {
    // BENCH_CARRY_CMN=1: each clip starts from the CMN estimate the previous one ended with (as a session's next utterance does)
    const u: StreamUtterance = pool.acquire({ prompt: null, cmn: carry ? cmn : null })!;
    const cpu0 = cpuSeconds(u.pid);
    for (let i = 0; i < c.pcm.length; i += 320) u.feed(c.pcm.subarray(i, i + 320));
    await u.hypothesis(); // everything fed is decoded
    const t = performance.now();
    const r: StreamResult = await u.end();
    cmn = r.cmn;
    ends.push(performance.now() - t);
    cpu += cpuSeconds(u.pid) - cpu0;
    const w = wordErrorRate(c.ref, r.words.map((x) => x.word).join(" "));
    errors += w.errors;
    words += w.referenceWords;
  }
  await pool.close();
  return { errors, words, cpu, ends };
}

// BENCH_CLIPS=librivox: only the five LibriVox clips (one speaker, as in a session)
const clips = (await labelledClips()).filter((c) => process.env.BENCH_CLIPS !== "librivox" || c.name.startsWith("sense_"));
const audio = clips.reduce((a, c) => a + c.pcm.length / 16_000, 0);
console.log(`${clips.length} clips, ${audio.toFixed(1)} s of speech`);
const fmt = (r: { errors: number; words: number; cpu: number }) => `WER ${((100 * r.errors) / r.words).toFixed(1)}% (${r.errors}/${r.words}), ${(r.cpu / audio).toFixed(3)} CPU-s per audio s`;
if (!process.env.BENCH_VARIANTS) {
  console.log("commit path, second pass on  :", fmt(await commitPath(clips, COMMIT_DECODER_OPTIONS)));
  console.log("commit path, second pass off :", fmt(await commitPath(clips, [...COMMIT_DECODER_OPTIONS, ...SECOND_PASS_OFF])));
}
// BENCH_VARIANTS='[["label",["-opt","value"]]]' measures other decoder options
const variants: [string, string[]][] = process.env.BENCH_VARIANTS ? JSON.parse(process.env.BENCH_VARIANTS) : [["on ", []], ["off", SECOND_PASS_OFF], ["fwdflat off, bestpath on", ["-fwdflat", "no"]], ["fwdflat on, bestpath off", ["-bestpath", "no"]]];
for (const [label, opts] of variants) {
  const r = await streamed(clips, [...opts]);
  const s = [...r.ends].sort((a, b) => a - b);
  console.log(`streamed, second pass ${label}:`, fmt(r), `; end ${s[0]!.toFixed(1)}–${s.at(-1)!.toFixed(1)} ms`);
}
