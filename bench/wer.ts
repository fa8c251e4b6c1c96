/**
 * Word error rate of the realtime plane per client sample rate (issue 44): does the
 * gateway's resampler lose accuracy? Every labelled clip (bench/support/clips.ts) is
 * taken by ffmpeg to each client rate, streamed as one item with a manual commit
 * (`turn_detection: null`) and scored against its transcript:
 *
 * - the native door at 16, 24 and 48 kHz (`?sample_rate=`);
 * - the OpenAI door at 24 kHz (its `audio/pcm`), base64 appends.
 *
 * 16 kHz never meets the resampler: it is the reference the other rates should match.
 * The stack decodes on the commit path (RT_STREAM_DECODERS=0): each item whole, by the
 * transcriber's PocketSphinx, deterministic.
 * Each clip is a session of its own (connect, commit, close), sent as fast as the
 * gateway takes it (a commit waits for everything before it).
 *
 *   ./scripts/bench.sh wer                 the table above, from the stack
 *   ./scripts/bench.sh wer --sweep         offline, without services: each clip at 24
 *                                          and 48 kHz through the Speex resampler at
 *                                          qualities 0…10 to 16 kHz, then PocketSphinx
 *                                          (the commit path's engine) on the whole clip;
 *                                          WER and CPU to resample 1 s (20 ms chunks)
 *   BENCH_DEBUG=1                          prints every hypothesis
 */
import { createPocketsphinxEngine } from "../services/transcriber/pocketsphinx/engine";
import { createResampler, RESAMPLER_QUALITY } from "../shared/audio/resample";
import { wordErrorRate } from "../shared/workers/wer";
import { atRate, nativeCommitted, openAiCommitted } from "../test/support/committed-clip";
import { RELAXED_ADMISSION } from "../test/support/realtime-support";
import { startStack } from "../test/support/stack";
import { labelledClips } from "./support/clips";
import { recordResults, type ResultRow } from "./support/results";

type Clip = Awaited<ReturnType<typeof labelledClips>>[number];
const clips = await labelledClips();

interface Score {
  errors: number;
  words: number;
  jfk: number;
}
/** Errors over every clip, and jfk.wav's own rate. */
function score(hypotheses: string[]): Score {
  const rates = clips.map((c, i) => wordErrorRate(c.ref, hypotheses[i]!));
  const jfk = rates[clips.findIndex((c) => c.name === "jfk.wav")]!;
  return { errors: rates.reduce((n, r) => n + r.errors, 0), words: rates.reduce((n, r) => n + r.referenceWords, 0), jfk: jfk.errors / jfk.referenceWords };
}
const show = (s: Score) => `WER ${(s.errors / s.words).toFixed(3)} (${s.errors}/${s.words}), jfk.wav ${s.jfk.toFixed(3)}`;

async function stackTable(rows: ResultRow[]) {
  // the commit path (one transcript per item, the same every run; a streaming decoder
  // would also refuse the next session until the last one's is back in the pool)
  const stack = await startStack({ LOG_LEVEL: "error", RT_STREAM_DECODERS: "0", ...RELAXED_ADMISSION });
  try {
    const { key } = await stack.issueKey("pro", "wer");
    const runs: { door: string; rate: number; send: (c: Clip) => Promise<string> }[] = [
      ...[16000, 24000, 48000].map((rate) => ({ door: "native", rate, send: (c: Clip) => nativeCommitted(stack.baseUrl, key, c.pcm, rate) })),
      { door: "openai", rate: 24000, send: (c: Clip) => openAiCommitted(stack.baseUrl, key, c.pcm) },
    ];
    console.log(`resampler: Speex quality ${RESAMPLER_QUALITY}; ${clips.length} clips, each one manually committed item`);
    for (const run of runs) {
      const hyps: string[] = [];
      for (const c of clips) {
        hyps.push(await run.send(c));
        if (process.env.BENCH_DEBUG) console.log(`  ${run.door} ${run.rate} ${c.name}: ${hyps.at(-1)}`);
      }
      const s = score(hyps);
      console.log(`${run.door.padEnd(6)} door ${run.rate / 1000} kHz: ${show(s)}`);
      rows.push({ door: run.door, rate: run.rate, quality: RESAMPLER_QUALITY, wer: s.errors / s.words, errors: s.errors, words: s.words, jfk_wer: s.jfk });
    }
  } finally {
    await stack.stop();
  }
}

const QUALITIES = [0, 1, 3, 5, 7, 10];

/** Milliseconds of CPU to resample one second of `rate` audio in 20 ms chunks at `quality`: the median of 7 rounds of 40 sessions. */
function cpuPerSecond(second: Int16Array, rate: number, quality: number): number {
  const rounds: number[] = [];
  for (let round = 0; round < 7; round++) {
    const t0 = performance.now();
    for (let n = 0; n < 40; n++) {
      const r = createResampler(rate, 16000, 1, quality);
      for (let i = 0; i < second.length; i += rate / 50) r.push(second.subarray(i, i + rate / 50));
      r.free();
    }
    rounds.push((performance.now() - t0) / 40);
  }
  return rounds.sort((a, b) => a - b)[3]!;
}

async function sweep(rows: ResultRow[]) {
  const jfk = clips.find((c) => c.name === "jfk.wav")!.pcm;
  const cpu = new Map<string, number>();
  // warm the JIT first, then measure every setting before PocketSphinx runs
  cpuPerSecond(atRate(jfk, 48000).subarray(0, 48000), 48000, 5);
  for (const rate of [24000, 48000]) for (const q of QUALITIES) cpu.set(`${rate}/${q}`, cpuPerSecond(atRate(jfk, rate).subarray(0, rate), rate, q));
  const engine = await createPocketsphinxEngine({ processes: 2 });
  const transcribe = async (pcms: Int16Array[]) => score(await Promise.all(pcms.map(async (pcm) => (await engine.transcribe({ pcm })).text)));
  console.log(`16 kHz (no resampler): ${show(await transcribe(clips.map((c) => c.pcm)))}`);
  for (const rate of [24000, 48000]) {
    const client = clips.map((c) => atRate(c.pcm, rate));
    for (const quality of QUALITIES) {
      const through = client.map((pcm) => {
        const r = createResampler(rate, 16000, 1, quality);
        const [head, tail] = [r.push(pcm), r.flush()];
        r.free();
        const out = new Int16Array(head.length + tail.length);
        out.set(head);
        out.set(tail, head.length);
        return out;
      });
      const ms = cpu.get(`${rate}/${quality}`)!;
      const s = await transcribe(through);
      console.log(`${rate / 1000} kHz, quality ${String(quality).padStart(2)}: ${show(s)}; ${ms.toFixed(2)} ms CPU per audio second`);
      rows.push({ rate, quality, wer: s.errors / s.words, errors: s.errors, words: s.words, jfk_wer: s.jfk, cpu_ms_per_audio_s: ms });
    }
  }
  await engine.close();
}

const rows: ResultRow[] = [];
if (process.argv.includes("--sweep")) await sweep(rows);
else await stackTable(rows);
recordResults(process.argv.includes("--sweep") ? "wer-sweep" : "wer", rows);
