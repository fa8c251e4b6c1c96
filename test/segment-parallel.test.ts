import { readdirSync, readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { planPieces } from "../domain/transcript/pieces";
import { shapeTranscription, transcriptPipeline } from "../domain/transcript/pipeline";
import { encodeWav } from "../shared/audio/wav";
import { attemptTimeoutMs, type RunningRouter } from "../shared/workers/router";
import { wordErrorRate } from "../shared/workers/wer";
import { waitFor } from "./support/jobs-helpers";
import { labelledSpeech } from "./support/long-speech";
import { startServiceProcess, type ServiceProcess } from "./support/service-process";
import { startStack, type Stack } from "./support/stack";

/**
 * docs/design/segment.md, "Long clips in parallel", on the real stack with the embedded engine
 * (two ps-worker processes): a long clip is cut at pauses, its pieces decoded at once and
 * stitched; the stitched timings are monotonic and match the single-request path's; with
 * `stream=true` the pieces' text comes in order; a ps-worker process killed under a piece
 * has that piece redone by the other process, the other pieces untouched; a whole worker
 * replica (another `stt serve` running the transcriber) killed under a piece has it
 * redone by the local worker once its heartbeats stop, not at the piece's timeout.
 */
const MAX_PIECE_SECONDS = 10;
const speech = labelledSpeech(36);
const wav = encodeWav(speech.pcm);
/** How far a word's start may move between the single path and the stitched pieces (s). */
const TIMING_TOLERANCE = 0.1;

let stack: Stack;
let key: string;

beforeAll(async () => {
  stack = await startStack({
    // both gateways, so HTTP goes through the uWS bridge as in a deployment; no VAD, so
    // the only ps-worker processes here are the engine's
    STT_SERVICES: "projector,transcriber,http-gateway,realtime-gateway",
    POCKETSPHINX_PROCESSES: "2",
    SEGMENT_PIECE_MAX_SECONDS: String(MAX_PIECE_SECONDS),
    // the router gives a silent worker up after 3 heartbeats + 1 s: 2.5 s
    WORKER_HEARTBEAT_MS: "500",
  });
  key = (await stack.issueKey("pro", "tenant-long")).key;
}, 120_000);
afterAll(async () => {
  await stack?.stop();
});

/** CPU ticks a process has used (utime). */
const cpu = (pid: number) => Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")[11]);

const post = (fields: Record<string, string> = {}) => {
  const form = new FormData();
  form.set("file", new Blob([new Uint8Array(wav)]), "long.wav");
  for (const [k, v] of Object.entries(fields)) form.set(k, v);
  return stack.fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: { authorization: `Bearer ${key}` }, signal: AbortSignal.timeout(180_000) });
};

/** Pairs of equal words in order (longest common subsequence of the two word lists). */
function matchedWords<T extends { word: string }>(a: T[], b: T[]): [T, T][] {
  const n = a.length;
  const m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Array<number>(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) lcs[i]![j] = a[i]!.word === b[j]!.word ? lcs[i + 1]![j + 1]! + 1 : Math.max(lcs[i + 1]![j]!, lcs[i]![j + 1]!);
  const pairs: [T, T][] = [];
  for (let i = 0, j = 0; i < n && j < m; ) {
    if (a[i]!.word === b[j]!.word) pairs.push([a[i++]!, b[j++]!]);
    else if (lcs[i + 1]![j]! >= lcs[i]![j + 1]!) i++;
    else j++;
  }
  return pairs;
}

/** The ps-worker processes started by `pid` (this test process: its engine pool; no streaming decoders run here). */
function psWorkers(pid = process.pid): number[] {
  const kids = readdirSync(`/proc/${pid}/task`).flatMap((tid) =>
    readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number),
  );
  return kids.filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/comm`, "utf8").trim() === "ps-worker";
    } catch {
      return false;
    }
  });
}

describe("a long clip in pieces", () => {
  let parallel: any;

  it("is cut at pauses, decoded in parallel and stitched: timings monotonic, and as the single path has them", { timeout: 180_000 }, async () => {
    const res = await post({ timestamp_granularities: "word" });
    expect(res.status).toBe(200);
    const pieces = Number(res.headers.get("x-segment-pieces"));
    // cut at the pauses into more pieces than the two engine slots (domain/transcript/pieces.ts)
    expect(pieces).toBe(planPieces(speech.pcm, 2, stack.config.workers.pieces).length);
    expect(pieces).toBeGreaterThan(Math.ceil(speech.seconds / MAX_PIECE_SECONDS));
    parallel = await res.json();
    expect(parallel.duration).toBeCloseTo(speech.seconds, 2);
    expect(parallel.segments.map((s: any) => s.id)).toEqual(parallel.segments.map((_: unknown, i: number) => i));
    for (let i = 1; i < parallel.segments.length; i++) expect(parallel.segments[i].start).toBeGreaterThanOrEqual(parallel.segments[i - 1].end);
    for (let i = 1; i < parallel.words.length; i++) expect(parallel.words[i].start).toBeGreaterThanOrEqual(parallel.words[i - 1].end);
    expect(parallel.words.at(-1).end).toBeLessThanOrEqual(parallel.duration);
    expect(parallel.text).toBe(parallel.segments.map((s: any) => s.text.trim()).join(" "));

    // The single path: the whole clip to the same router, shaped by the same pipeline.
    const router = stack.runtime.ctx.router as RunningRouter;
    const whole = await router.transcribe({ pcm: speech.pcm });
    const single = shapeTranscription(transcriptPipeline({ engineFormatted: whole.formatted }), whole.result);
    const werParallel = wordErrorRate(speech.reference, parallel.text).wer;
    const werSingle = wordErrorRate(speech.reference, single.text).wer;
    const pairs = matchedWords(single.words, parallel.words);
    const shifts = pairs.map(([s, p]) => Math.abs(s.start - p.start));
    const within = shifts.filter((d) => d <= TIMING_TOLERANCE).length;
    console.log(
      `${speech.seconds.toFixed(1)} s in ${pieces} pieces: WER ${(werParallel * 100).toFixed(1)}% (single path ${(werSingle * 100).toFixed(1)}%); ` +
        `${pairs.length} of ${single.words.length} words matched, ${within} within ${TIMING_TOLERANCE} s (largest shift ${Math.max(...shifts).toFixed(2)} s)`,
    );
    // Each piece's engine normalises over its piece rather than the whole clip, so a few
    // words come out differently: never many more wrong (this clip is two recordings,
    // LibriVox then jfk.wav, and the single path carries LibriVox's cepstral mean into
    // jfk.wav, so the pieces get more right: 33% against 42%); the words both recognise
    // sit where the single path puts them.
    expect(werParallel - werSingle).toBeLessThan(0.08);
    // (the words they recognise differently are jfk.wav's: 78 of 92 shared)
    expect(pairs.length).toBeGreaterThanOrEqual(0.8 * Math.min(single.words.length, parallel.words.length));
    expect(within).toBeGreaterThanOrEqual(0.95 * pairs.length);
    expect(Math.max(...shifts)).toBeLessThan(0.5);
  });

  it("stream=true: each piece's text in order as it is transcribed; the deltas are the done event's text", { timeout: 180_000 }, async () => {
    const res = await post({ stream: "true" });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const events = (await res.text())
      .split("\n\n")
      .filter((e) => e.startsWith("data: "))
      .map((e) => JSON.parse(e.slice(6)));
    const deltas = events.filter((e) => e.type === "transcript.text.delta").map((e) => e.delta as string);
    const done = events.at(-1);
    expect(done).toMatchObject({ type: "transcript.text.done", usage: { type: "duration", seconds: Math.ceil(speech.seconds) } });
    expect(deltas.length).toBe(parallel.segments.length);
    expect(deltas.join("")).toBe(done.text);
    // the same pieces through the same engine: the same words as the answer above
    expect(done.text).toBe(parallel.text);
  });

  it("a ps-worker process killed under a piece: the other process redoes that piece, the others are kept", { timeout: 180_000 }, async () => {
    const before = psWorkers();
    expect(before).toHaveLength(2);
    const idle = new Map(before.map((pid) => [pid, cpu(pid)]));
    const answer = post({ response_format: "json" });
    // the first process to start decoding is killed mid-piece
    let victim: number | undefined;
    for (let i = 0; i < 400 && victim === undefined; i++) {
      await new Promise((r) => setTimeout(r, 25));
      victim = before.find((pid) => cpu(pid) > idle.get(pid)! + 5);
    }
    expect(victim).toBeDefined();
    process.kill(victim!, "SIGKILL");
    const res = await answer;
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).text).toBe(parallel.text);
    // the pool replaced the process
    await expect.poll(() => psWorkers().length, { timeout: 30_000 }).toBe(2);
    expect(psWorkers()).not.toContain(victim);
  });
});

describe("a worker replica dies under a piece", () => {
  let replica: ServiceProcess;
  const REPLICA = "replica-pocketsphinx";
  const router = () => stack.runtime.ctx.router as RunningRouter;

  beforeAll(async () => {
    replica = await startServiceProcess(stack, "transcriber", { WORKER_ID: "replica", POCKETSPHINX_PROCESSES: "1", WORKER_HEARTBEAT_MS: "300", RT_STREAM_DECODERS_WARM: "0" });
    await waitFor(async () => router().workers().find((w) => w.id === REPLICA)?.warm, { timeoutMs: 60_000, what: "the replica's worker warm" });
  }, 120_000);
  afterAll(async () => {
    await replica?.kill();
  });

  it("its piece is redone by the local worker once its heartbeats stop; the other pieces are kept", { timeout: 240_000 }, async () => {
    // Undisturbed: three engine slots (two local processes, the replica's one).
    const calm = await post({ response_format: "json" });
    expect(calm.status).toBe(200);
    const pieces = calm.headers.get("x-segment-pieces");
    const workers = calm.headers.get("x-worker-id")!.split(", ");
    expect(workers).toContain(REPLICA);
    const text = ((await calm.json()) as any).text as string;

    const [engine] = psWorkers(replica.proc.pid!);
    const idle = cpu(engine!);
    const answer = post({ response_format: "json" });
    await expect.poll(() => cpu(engine!) > idle + 5, { timeout: 60_000, interval: 25 }).toBe(true);
    const killedAt = Date.now();
    await replica.kill();
    const res = await answer;
    const afterKillMs = Date.now() - killedAt;
    expect(res.status).toBe(200);
    // the same pieces through identical engines: the same words
    expect(res.headers.get("x-segment-pieces")).toBe(pieces);
    expect(res.headers.get("x-worker-id")).not.toContain(REPLICA);
    expect(((await res.json()) as any).text).toBe(text);
    // given up on: no longer offered clips
    expect(router().workers().map((w) => w.id)).not.toContain(REPLICA);
    const pieceTimeout = attemptTimeoutMs(stack.config.workers.attemptTimeoutMs, MAX_PIECE_SECONDS, 2);
    console.log(`worker replica killed under a piece: answered ${afterKillMs} ms later (the piece's attempt timeout: ${pieceTimeout} ms)`);
    expect(afterKillMs).toBeLessThan(pieceTimeout);
  });
});
