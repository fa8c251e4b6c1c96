/**
 * Batch-job benchmark: `npx tsx bench/jobs.ts` (needs NATS and Postgres, as the tests
 * do). Everything runs in-process on the real stack; the audio is served by a local
 * HTTP server.
 *
 * 1. Orchestration overhead per chunk: a job of many short slices against a zero-cost
 *    worker (a real NATS worker service whose engine answers an empty transcript at
 *    once), so what is left is our own work per slice: process manager decision and
 *    append, command publish, step consumer, lease, PCM range read, worker
 *    request/reply, checkpoint write, ChunkTranscribed append, projection. At
 *    concurrency 1 the slices run one after another, so (last slice end − first slice
 *    start) / slices is the overhead per slice; at concurrency 6 the same job shows
 *    the throughput of the pipeline.
 * 2. Wall time of 10 minutes of real speech (silero_test.wav ten times) with the
 *    embedded PocketSphinx workers at concurrency 1, 3 and 6.
 *
 * Options (env): BENCH_PART=overhead|wall, BENCH_MINUTES (default 10),
 * BENCH_SEGMENT_SECONDS (default 30), BENCH_SLICES (default 60, part 1),
 * BENCH_CONCURRENCY (default "1,3,6", part 2).
 */
import { readFileSync } from "node:fs";
import { availableParallelism, loadavg } from "node:os";
import { startWorkerService } from "../services/transcriber/worker-service";
import { loadEvents } from "../shared/event-store";
import { createLogger } from "../shared/logger";
import type { TranscriptionEngine } from "../shared/workers/types";
import type { JobView } from "../schemas/jobs";
import { jobEventEnvelope, type JobEvent } from "../domain/jobs/events";
import { startStack, type Stack } from "../test/support/stack";
import { startHttp } from "../test/support/jobs-helpers";
import { fixturePath } from "../test/support/fixtures";
import { encodeWav } from "../shared/audio/wav";

const PART = process.env.BENCH_PART;
const MINUTES = Number(process.env.BENCH_MINUTES ?? 10);
const SEGMENT = Number(process.env.BENCH_SEGMENT_SECONDS ?? 30);
const SLICES = Number(process.env.BENCH_SLICES ?? 60);
const CONCURRENCIES = (process.env.BENCH_CONCURRENCY ?? "1,3,6").split(",").map(Number);

const FIXTURE = readFileSync(fixturePath("silero_test.wav"));
const PCM = FIXTURE.subarray(44);

/** PCM16 bytes (16 kHz mono) as a WAV file. */
const wav = (pcm: Buffer) => encodeWav(new Int16Array(new Uint8Array(pcm).buffer));

function zeroCostEngine(): TranscriptionEngine {
  return {
    kind: "zero",
    formatsText: true,
    models: ["stt-1", "stt-large-v3-turbo"],
    realTimeFactor: 0.01,
    concurrency: 1024,
    warm: () => true,
    transcribe: async (r) => ({ task: "transcribe", language: "en", duration: r.pcm.length / 16_000, text: "", segments: [], words: [] }),
    close: async () => undefined,
  };
}

interface Run {
  wallMs: number;
  events: { event: JobEvent; at: number }[];
  view: JobView;
}

async function runJob(stack: Stack, key: string, audioUrl: string, segmentSeconds: number, concurrency: number): Promise<Run> {
  const started = Date.now();
  const res = await stack.fetch("/v1/audio/transcriptions/jobs", {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ audio_url: audioUrl, segment_seconds: segmentSeconds, concurrency }),
  });
  if (res.status !== 202) throw new Error(`submit failed: ${res.status} ${await res.text()}`);
  const { workflow_id } = (await res.json()) as { workflow_id: string };
  let view: JobView;
  while (true) {
    const r = await stack.fetch(`/v1/audio/transcriptions/jobs/${workflow_id}`, { headers: { authorization: `Bearer ${key}` } });
    view = (await r.json()) as JobView;
    if (view.status === "complete" || view.status === "errored") break;
    await new Promise((r) => setTimeout(r, 50));
  }
  const wallMs = Date.now() - started;
  if (view.status !== "complete") throw new Error(`job errored: ${JSON.stringify(view.error)}`);
  const { nats } = stack;
  const loaded = await loadEvents(nats.js, nats.jsm, nats.topology.streams.jobs.name, jobEventEnvelope, nats.topology.subjects.jobEvent(workflow_id));
  return { wallMs, view, events: loaded.events.map((r) => ({ event: r.event, at: Date.parse(r.event.data.at) })) };
}

function phases(run: Run) {
  const at = (pred: (e: JobEvent) => boolean) => run.events.find((r) => pred(r.event))?.at ?? NaN;
  const submitted = at((e) => e.type === "JobSubmitted");
  const fetched = at((e) => e.type === "AudioFetched");
  const sliced = at((e) => e.type === "AudioSliced");
  const firstChunk = at((e) => e.type === "StepStarted" && e.data.step.startsWith("transcribe_chunk_"));
  const chunkEnds = run.events.filter((r) => r.event.type === "ChunkTranscribed").map((r) => r.at);
  const lastChunk = Math.max(...chunkEnds);
  const completed = at((e) => e.type === "JobCompleted");
  const failedAttempts = run.events.filter((r) => r.event.type === "StepAttemptFailed").length;
  return { submitted, fetched, sliced, firstChunk, lastChunk, completed, chunks: chunkEnds.length, failedAttempts };
}

async function benchOverhead() {
  const stack = await startStack({ WORKER_EMBEDDED: "none", LOG_LEVEL: "error" });
  const worker = await startWorkerService({ nats: stack.nats, engine: zeroCostEngine(), id: "zero-cost", heartbeatMs: 1000, logger: createLogger("error") });
  // SLICES slices of 2 s each: repeat the fixture as needed.
  const seconds = SLICES * 2;
  const pcm = Buffer.concat(Array.from({ length: Math.ceil(seconds / 60) }, () => PCM)).subarray(0, seconds * 32000);
  const audio = await startHttp((_req, res) => {
    res.writeHead(200, { "content-type": "audio/wav" });
    res.end(wav(pcm));
  });
  try {
    const { key } = await stack.issueKey("pro", "bench");
    await new Promise((r) => setTimeout(r, 1500)); // let the router see the zero-cost worker
    await runJob(stack, key, `${audio.url}/a.wav`, 2, 1); // warm-up
    console.log(`\n== Orchestration overhead: ${SLICES} slices of 2 s, zero-cost worker`);
    for (const concurrency of [1, 6]) {
      const run = await runJob(stack, key, `${audio.url}/a.wav`, 2, concurrency);
      const p = phases(run);
      const perChunk = (p.lastChunk - p.firstChunk) / p.chunks;
      console.log(
        `concurrency ${concurrency}: job wall ${run.wallMs} ms (client submit → poll sees complete); ` +
          `fetch+decode ${p.fetched - p.submitted} ms, slice ${p.sliced - p.fetched} ms, ` +
          `${p.chunks} slices in ${p.lastChunk - p.firstChunk} ms = ${perChunk.toFixed(1)} ms per slice` +
          `${concurrency === 1 ? " (overhead per slice, sequential)" : ` (${((p.chunks / (p.lastChunk - p.firstChunk)) * 1000).toFixed(0)} slices/s)`}, ` +
          `aggregate+complete ${p.completed - p.lastChunk} ms`,
      );
    }
  } finally {
    await audio.stop();
    await worker.stop();
    await stack.stop();
  }
}

async function benchWall() {
  const stack = await startStack({ LOG_LEVEL: "error" });
  const pcm = Buffer.concat(Array.from({ length: MINUTES }, () => PCM));
  const audio = await startHttp((_req, res) => {
    res.writeHead(200, { "content-type": "audio/wav" });
    res.end(wav(pcm));
  });
  try {
    const { key } = await stack.issueKey("pro", "bench");
    await new Promise((r) => setTimeout(r, 1500));
    console.log(`\n== ${MINUTES} min of real speech, segment_seconds ${SEGMENT}, embedded PocketSphinx (${availableParallelism()} cores)`);
    for (const concurrency of CONCURRENCIES) {
      const run = await runJob(stack, key, `${audio.url}/long.wav`, SEGMENT, concurrency);
      const p = phases(run);
      const audioSeconds = run.view.output!.result.metadata.audio_duration_seconds;
      console.log(
        `concurrency ${concurrency}: wall ${(run.wallMs / 1000).toFixed(1)} s for ${audioSeconds} s of audio ` +
          `(${(audioSeconds / (run.wallMs / 1000)).toFixed(1)}× real time); ${p.chunks} slices; ` +
          `fetch+decode ${p.fetched - p.submitted} ms, slice ${p.sliced - p.fetched} ms, transcription ${((p.lastChunk - p.firstChunk) / 1000).toFixed(1)} s, ` +
          `aggregate+complete ${p.completed - p.lastChunk} ms; ${run.view.output!.result.summary.num_segments} segments; ` +
          `${p.failedAttempts} failed attempts; load average ${loadavg()[0]!.toFixed(1)}`,
      );
    }
  } finally {
    await audio.stop();
    await stack.stop();
  }
}

if (PART !== "wall") await benchOverhead();
if (PART !== "overhead") await benchWall();
process.exit(0);
