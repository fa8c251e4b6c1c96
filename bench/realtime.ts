/**
 * Realtime plane benchmark: N concurrent WebSocket sessions streaming real speech in
 * real time from this process against the whole service (`stt serve`, all services,
 * one port) running in a separate process on the local NATS and Postgres.
 *
 *   npx tsx bench/realtime.ts [--sessions 10,25,50] [--seconds 30] [--frame-ms 40]
 *                             [--ps-processes 1] [--phase spread|aligned] [--ramp 0] [--admit 1]
 *                             [--start-within 5] [--probe 1]
 *
 * Per round it prints:
 * - held: sessions that streamed to the end and closed 1000 with every byte recorded
 *   by the gateway (rt.session.closed audio_ms == audio sent) — "no frame loss" also
 *   requires no 1013 closes and the VAD consumers drained at the end (within 2 s of
 *   the last close: their acks are cumulative);
 * - VAD decision: speech_stopped received − the moment the client sent the audio that
 *   let the VAD decide (end of speech + silence_duration_ms): gateway → JetStream → VAD
 *   → JetStream → gateway → client under load;
 * - speech-stopped → transcript: p50/p99 of (completed received − speech_stopped
 *   received − worker_ms − queue_ms), i.e. our pipeline without engine time (worker_ms:
 *   in the router; queue_ms: waiting for a transcription slot behind other utterances,
 *   which is engine capacity), the engine wait on its own, and the total;
 * - memory per session: server RSS with N sessions open minus RSS before, over N
 *   (the PocketSphinx worker processes are separate and not counted);
 * - server CPU over the round, and on a second line the CPU of the bench's own client
 *   and of nats-server (all share the machine's cores); further lines give each of them
 *   over the streaming window alone (the round's figures also cover the closes), the
 *   events a second the clients received and the CPU per 100 sessions;
 * - streaming (docs/design/realtime.md, "Streaming recognition"): first partial (a non-empty
 *   delta or an interim; the bench asks for interims) after speech_started, p50/p99 and
 *   the share of utterances over 2 s with one within 1 s; how many finals came from a
 *   streaming decoder; the share of committed utterances transcribed before close.
 *
 * `--start-within S` (speakers who start together, as issue 43 asks): every upgrade is
 * sent at once, and each session starts speaking at a random moment of the first S
 * seconds, from its own random point of the recording; `--probe 1` then tries one more
 * session 3 s after the last one started and prints whether it was admitted or refused
 * (with its Retry-After). Refusals are printed with their Retry-After, and the VAD's engine
 * reports over the streaming window (speakers, busy decoders, load, the cost per speaker
 * admission uses).
 *
 * `--diarize 1`: the native door's sessions ask for live speaker labels (`diarize: true`).
 *
 * `--audio librivox` streams the five LibriVox clips of pocketsphinx-testdata, each
 * followed by 0.8 s of silence, looped (continuous read speech); the default loops
 * jfk.wav with 1.5 s of silence.
 * The engine is the embedded PocketSphinx pool (`--ps-processes`, default 1, leaving a
 * core for the plane); it is the bottleneck for transcripts, not for audio intake.
 * `--split vad,rt-transcriber` runs those services in a second `stt serve` process (the
 * rest in the first; memory and CPU are the processes' sums, each process's in
 * brackets), as a deployment that gives the VAD its own core would; `--split
 * vad/rt-transcriber` runs each group (separated by "/") in a process of its own.
 * Every session is admitted (the service's admission by headroom is lifted: this bench
 * measures the plane itself past its limits); `--admit 1` keeps the defaults, so the
 * sessions the plane has no headroom for are refused 503 and counted as refused.
 * `--door openai` drives the OpenAI Realtime door (`/v1/realtime?intent=transcription`,
 * docs/realtime.md) instead of the native stream: the same speech resampled to 24 kHz
 * (`audio/pcm`), each frame an `input_audio_buffer.append` of base64 in a text frame,
 * default session settings (no interims: the native door asks for them); the figures
 * compare the two doors on the same plane. `--rate 24000` has the native clients send the
 * same 24 kHz audio (`?sample_rate=24000`), so both doors pay the same resampling.
 * `--encode-once 1`: the door's clients encode each loop position's append once (JSON and
 * base64) and send the same text from every session, so the bench client costs what a
 * native one does: on this 2-core machine the clients share the server's cores, and
 * encoding every append (as a real client does, on its own machine) takes the server 4–5
 * points of a core that a native client leaves it; with it the figures compare the servers.
 * `--engine zero` measures the plane apart from engine capacity: the only worker is an
 * OpenAI-compatible server in this process that answers every clip at once with an
 * empty transcript (WORKER_EMBEDDED=none, no streaming decoders).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { BenchDeployment } from "./support/deployment";
import { pct, serveCommand, startZeroEngine, stopServer, waitForServer } from "./support/server";
import { cpuSeconds, natsCpuSeconds, processTree } from "./support/proc";
import { createSendLog, decisionOffset } from "./support/vad-decision";
import { speechLoop } from "./support/clips";
import { availableParallelism } from "node:os";
import { appendFileSync, createWriteStream, readFileSync } from "node:fs";
import WebSocket from "ws";
import { connectNats } from "../shared/nats";
import { loadConfig } from "../shared/config";
import { createResampler } from "../shared/audio/resample";
import { recordResults, type ResultRow } from "./support/results";

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i]!.replace(/^--/, ""), process.argv[i + 1] ?? "");
const rounds = (args.get("sessions") ?? "10,25,50").split(",").map(Number);
const seconds = Number(args.get("seconds") ?? 30);
const frameMs = Number(args.get("frame-ms") ?? 40);
const psProcesses = args.get("ps-processes") ?? "1";
const audioSource = args.get("audio") ?? "jfk";
const zeroEngine = args.get("engine") === "zero";
const admit = args.has("admit");
const openaiDoor = args.get("door") === "openai";
// --rate 24000: native clients send 24 kHz (resampled by the gateway, as the OpenAI door's audio/pcm is)
const native24 = !openaiDoor && args.get("rate") === "24000";
// --encode-once 1: the door's clients reuse one encoding of each append (see the header)
const encodeOnce = args.has("encode-once");
// --start-within S: the sessions' upgrades all at once, each starting to speak at a random moment of the first S s
const startWithinMs = Number(args.get("start-within") ?? 0) * 1000;
/** `--diarize 1`: the native sessions ask for live speaker labels (docs/diarization.md), whose cost admission counts. */
const diarize = args.get("diarize") === "1";
// --probe 1: one more session, 3 s after the last one started: admitted, or refused with its Retry-After
const probe = args.has("probe");
const provider = zeroEngine ? await startZeroEngine() : null;

const deployment = new BenchDeployment();
const { prefix } = deployment;
const base = loadConfig(process.env);

/** Every service of `stt serve` (docs/operations.md). */
const ALL_SERVICES = ["projector", "transcriber", "http-gateway", "vad", "rt-transcriber", "jobs-manager", "jobs-fetcher", "jobs-slicer", "jobs-transcriber", "jobs-aggregator", "jobs-reviewer", "webhooks", "realtime-gateway"];
// --split vad,rt-transcriber: those services run in a second `stt serve` process;
// --split vad/rt-transcriber: each group in a process of its own
const splitGroups = (args.get("split") ?? "").split("/").map((g) => g.split(",").filter(Boolean)).filter((g) => g.length);
const split = splitGroups.flat();

function startServer(services = split.length ? ALL_SERVICES.filter((x) => !split.includes(x)).join(",") : "all"): Promise<{ proc: ChildProcess; port: number }> {
  // BENCH_CPU_PROF=<dir>: the server writes a V8 CPU profile there when it stops
  const prof = process.env.BENCH_CPU_PROF ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : [];
  // BENCH_HEAP_SNAPSHOT=<dir>: each server process writes a heap snapshot there half way through a round
  if (process.env.BENCH_HEAP_SNAPSHOT) prof.push("--heapsnapshot-signal=SIGUSR2", `--diagnostic-dir=${process.env.BENCH_HEAP_SNAPSHOT}`);
  // BENCH_NODE_FLAGS="--trace-gc …": more flags for the server processes' node
  prof.push(...(process.env.BENCH_NODE_FLAGS ?? "").split(" ").filter(Boolean));
  // bin/stt's allocator and V8 flags (serveCommand), and the profiling flags above
  const proc = spawn(...serveCommand(prof), {
    env: {
      ...process.env,
      ...deployment.env({ STT_SERVICES: services }),
      POCKETSPHINX_PROCESSES: psProcesses,
      // generous timeouts: under load utterances queue for the engine
      POCKETSPHINX_REAL_TIME_FACTOR: "20",
      RT_TRANSCRIBE_CONCURRENCY: psProcesses,
      // every streaming decoder loaded before the sessions start, as in production
      // (RT_STREAM_DECODERS unset: the service's default, 8 per core)
      RT_STREAM_DECODERS_WARM: process.env.RT_STREAM_DECODERS_WARM ?? process.env.RT_STREAM_DECODERS,
      // this bench measures the plane itself, every session admitted (sessions open one
      // after another, faster than RT_ADMIT_BURST allows); --admit keeps the service's
      // admission by headroom (docs/realtime-reference.md, "Admission and shedding")
      ...(admit ? {} : { RT_ADMIT_MAX_LOOP_DELAY_MS: "60000", RT_ADMIT_MAX_VAD_LAG_MS: "60000", RT_ADMIT_MAX_DECISION_MS: "60000", RT_ADMIT_MAX_ENGINE_SHARE: "1", RT_ENGINE_SPEAKER_CORES: "0.001", RT_ADMIT_BURST: "1000000", RT_SHED_LAG_MS: "600000" }),
      ...(provider ? { WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: provider.url, WORKER_OPENAI_CONCURRENCY: "256", WORKER_OPENAI_REAL_TIME_FACTOR: "0.5", RT_TRANSCRIBE_CONCURRENCY: "256", RT_STREAM_DECODERS: "0" } : {}),
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  // BENCH_SERVER_LOG=<prefix>: each server process's stdout and stderr also go to <prefix>.<services>.log
  if (process.env.BENCH_SERVER_LOG) {
    const file = createWriteStream(`${process.env.BENCH_SERVER_LOG}.${services}.log`);
    proc.stdout!.pipe(file);
    proc.stderr!.pipe(file);
  }
  return waitForServer(proc).then((port) => ({ proc, port }));
}

/** The gateway's /metrics as `name{labels}` → value (labels as exposed). */
async function scrapeMetrics(baseUrl: string): Promise<Map<string, number>> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    const m = /^([^#\s][^\s]*)\s+(\S+)$/.exec(line);
    if (m) out.set(m[1]!, Number(m[2]));
  }
  return out;
}

/** RSS and CPU seconds of the server processes, summed. */
function procStat(pids: number[]) {
  const each = pids.map((pid) => {
    const rssKb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]);
    return { rssMb: rssKb / 1024, cpuSeconds: cpuSeconds(pid) };
  });
  return { rssMb: each.reduce((a, e) => a + e.rssMb, 0), cpuSeconds: each.reduce((a, e) => a + e.cpuSeconds, 0), each };
}

interface SessionRun {
  ws: WebSocket;
  sessionId?: string;
  sentBytes: number;
  offset: number;
  events: { type: string; t: number; item_id?: string; worker_ms?: number; queue_ms?: number; audio_end_ms?: number; audio_start_ms?: number; text?: number; worker_id?: string }[];
  close?: { code: number; reason: string };
  refused?: string;
  /** The refusal's Retry-After header. */
  retryAfter?: string;
  error?: string;
  closedAt?: number;
  closed: Promise<void>;
  frames?: number;
  /** When each timeline position left the client. */
  sendLog: ReturnType<typeof createSendLog>;
}

/** `pcm` through a resampler, its tail flushed: ⌈n × out / in⌉ samples. */
function whole(r: ReturnType<typeof createResampler>, pcm: Int16Array): Int16Array {
  const head = r.push(pcm);
  const tail = r.flush();
  const out = new Int16Array(head.length + tail.length);
  out.set(head);
  out.set(tail, head.length);
  r.free();
  return out;
}

async function main() {
  const loop = speechLoop(audioSource);
  const loopBytes = new Uint8Array(loop.buffer);
  const frameBytes = (16000 * 2 * frameMs) / 1000;
  // --door openai: the loop at 24 kHz, a frame of it per 16 kHz frame (sentBytes stays in 16 kHz bytes)
  // the whole loop: the resampler's last milliseconds come out with its flush (resample.ts)
  const loop24 = openaiDoor || native24 ? whole(createResampler(16000, 24000, 1), loop) : null;
  const loop24Bytes = loop24 ? new Uint8Array(loop24.buffer, loop24.byteOffset, loop24.byteLength) : null;
  const at24 = (from: number, frame: Uint8Array) => {
    const at = Math.floor((from * 3) / 4) * 2;
    return loop24Bytes!.subarray(at, Math.min(loop24Bytes!.length, at + (frame.length * 3) / 2));
  };
  const encodeAppend = (from: number, frame: Uint8Array) => JSON.stringify({ type: "input_audio_buffer.append", audio: Buffer.from(at24(from, frame)).toString("base64") });
  // --encode-once: each loop position's append is encoded once and the text reused by every session
  const appends = new Map<number, Buffer>();
  const toAppend = (from: number, frame: Uint8Array): string | Buffer => {
    if (!encodeOnce) return encodeAppend(from, frame);
    let text = appends.get(from);
    if (!text) appends.set(from, (text = Buffer.from(encodeAppend(from, frame))));
    return text;
  };

  const nats = await connectNats({ url: base.nats.url, prefix });
  // the VAD's engine reports (shared/realtime-backlog.ts): speakers, load, cost per speaker
  const engineReports: { t: number; speakers: number; busy: number; size: number; load: number; per_speaker: number }[] = [];
  nats.nc.subscribe(`${prefix}.rt.load`, {
    callback: (_e, m) => {
      try {
        const r = m.json() as { engine?: { speakers?: number; busy: number; size: number; load: number; per_speaker: number } };
        if (r.engine) engineReports.push({ t: performance.now(), speakers: r.engine.speakers ?? r.engine.busy, ...r.engine });
      } catch {
        /* not JSON */
      }
    },
  });
  const closedAudio = new Map<string, number>();
  const serverClose = new Map<string, string>();
  nats.nc.subscribe(`${prefix}.rt.evt.>`, {
    callback: (_e, m) => {
      try {
        const e = m.json() as { type: string; data: { session_id: string; audio_ms: number; code: number; reason: string; duration_ms: number } };
        if (e.type === "rt.session.closed") {
          closedAudio.set(e.data.session_id, e.data.audio_ms);
          serverClose.set(e.data.session_id, `${e.data.code} ${e.data.reason} after ${e.data.duration_ms} ms`);
        }
      } catch {
        /* not JSON */
      }
    },
  });

  console.log(`realtime bench${openaiDoor ? " (the OpenAI Realtime door)" : ""}: ${seconds} s of ${audioSource} speech per session, ${frameMs} ms frames, PocketSphinx processes ${psProcesses}, a fresh server per round`);
  console.log("sessions | held | closes | lost ms | vad pending | VAD decision p50/p99 | stopped→transcript p50/p99 minus engine (wait+work) | engine wait p50/p99 | stopped→transcript with engine p50/p99 | completed/failed of committed | first partial after speech_started | MB/session | server CPU");
  let proc: ChildProcess | undefined;
  let extras: ChildProcess[] = [];
  const resultRows: ResultRow[] = [];
  try {
    for (const n of rounds) {
      const server = await startServer();
      proc = server.proc;
      // the other processes start once the first has run the migrations
      for (const group of splitGroups) extras.push((await startServer(group.join(","))).proc);
      const port = server.port;
      const pids = [server.proc.pid!, ...extras.map((x) => x.pid!)];
      const baseUrl = `http://127.0.0.1:${port}`;
      const keys: string[] = [];
      // --probe: the extra session has a key of its own (a key holds 10 sessions here)
      for (let i = 0; i < Math.ceil(n / 10) + (probe ? 1 : 0); i++) {
        keys.push(await deployment.issueKey(baseUrl, `bench-${i}`));
      }
      // the streaming decoders load their models (0.44 CPU-s each) before the sessions start:
      // at least 4 s, and until the server's processes (decoders included) use under a
      // fifth of a core (36 decoders load for 8 s or more on 2 cores)
      await new Promise((r) => setTimeout(r, 4000));
      for (let i = 0; i < 30; i++) {
        const tree = pids.flatMap((p) => processTree(p));
        const cpu = () => tree.reduce((a, p) => a + (() => { try { return cpuSeconds(p); } catch { return 0; } })(), 0);
        const c0 = cpu();
        await new Promise((r) => setTimeout(r, 1000));
        if (cpu() - c0 < 0.2) break;
      }
      const before = procStat(pids);
      const clientBefore = process.cpuUsage();
      const natsBefore = natsCpuSeconds();
      const metricsBefore = await scrapeMetrics(baseUrl);
      const sessions: SessionRun[] = [];
      const openOne = async (i: number): Promise<SessionRun> => {
        const ws = new WebSocket(`ws://127.0.0.1:${port}${openaiDoor ? "/v1/realtime?intent=transcription" : `/v1/audio/transcriptions/stream${native24 ? "?sample_rate=24000" : ""}`}`, {
          headers: { authorization: `Bearer ${keys[i === n ? keys.length - 1 : Math.floor(i / 10)]}` },
          perMessageDeflate: process.env.BENCH_DEFLATE === "1",
          // A zero masking key (valid: RFC 6455 lets the client pick any key) makes
          // masking a copy-free no-op in ws: masking 25,000 frames a second was a large
          // share of the client's CPU, which shares the two cores with the server.
          generateMask: () => {},
        });
        const s: SessionRun = { ws, sentBytes: 0, offset: Math.floor(Math.random() * (loopBytes.length / frameBytes)) * frameBytes, events: [], closed: undefined as never, sendLog: createSendLog() };
        s.closed = new Promise<void>((resolve) => {
          ws.on("close", (code, reason) => {
            s.close = { code, reason: reason.toString() };
            s.closedAt = performance.now();
            resolve();
          });
          ws.on("error", (err) => {
            s.error = err.message;
            resolve();
          });
        });
        if (process.env.BENCH_DEBUG)
          ws.once("open", () => {
            const sock = (ws as unknown as { _socket: import("node:net").Socket })._socket;
            sock.once("end", () => (s.error = `${s.error ?? ""} tcp-end`));
            sock.once("error", (e) => (s.error = `${s.error ?? ""} tcp-error ${e.message}`));
            ws.once("close", () => (s.error = `${s.error ?? ""} closeFrameReceived=${(ws as unknown as { _closeFrameReceived: boolean })._closeFrameReceived}`));
          });
        ws.on("message", (data) => {
          const t = performance.now();
          const e = JSON.parse(data.toString());
          if (e.type === "session.created" && openaiDoor) s.sessionId = e.session.id;
          else if (e.type === "session.created") {
            s.sessionId = e.session_id;
            ws.send(JSON.stringify({ type: "session.update", session: { input_audio_transcription: { interim_results: true, ...(diarize ? { diarize: true } : {}) } } }));
          }
          if (openaiDoor && e.type === "input_audio_buffer.committed") {
            // OpenAI's committed carries no times: those of the item's speech events
            e.audio_start_ms = s.events.find((x) => x.type === "input_audio_buffer.speech_started" && x.item_id === e.item_id)?.audio_start_ms;
            e.audio_end_ms = s.events.find((x) => x.type === "input_audio_buffer.speech_stopped" && x.item_id === e.item_id)?.audio_end_ms;
          }
          const text = e.delta ?? e.transcript;
          s.events.push({ type: e.type, t, item_id: e.item_id, worker_ms: e.worker_ms, queue_ms: e.queue_ms, audio_end_ms: e.audio_end_ms, audio_start_ms: e.audio_start_ms, text: typeof text === "string" ? text.length : undefined, worker_id: e.worker_id });
        });
        await new Promise<void>((resolve) => {
          ws.once("open", () => resolve());
          ws.once("error", () => resolve());
          ws.once("unexpected-response", (_req, res) => {
            let body = "";
            res.on("data", (c: Buffer) => (body += c));
            res.on("end", () => {
              s.refused = `${res.statusCode} ${(() => { try { return JSON.parse(body).error.code; } catch { return ""; } })()}`;
              s.retryAfter = res.headers["retry-after"];
              resolve();
            });
          });
        });
        return s;
      };
      // --start-within S: every upgrade at once (a crowd does not queue its handshakes)
      if (startWithinMs) sessions.push(...(await Promise.all(Array.from({ length: n }, (_, i) => openOne(i)))));
      else for (let i = 0; i < n; i++) sessions.push(await openOne(i));
      const open = sessions.filter((s) => s.ws.readyState === WebSocket.OPEN);
      // stream in real time: one timer for every session, ticking every 5 ms so a frame
      // leaves within a few ms of when its audio would have been captured (a tick of half
      // a frame sent 40 ms frames up to 20 ms late, jitter a real-time client does not have).
      // Each session keeps its own frame clock, its phase spread evenly over one frame:
      // independent clients are not in step, and sending every session's frame in the
      // same instant made bursts of N frames every frameMs that no population of clients
      // makes. `--phase aligned` sends them all at once, as before.
      const aligned = args.get("phase") === "aligned";
      // --ramp R: session i starts streaming i/N × R seconds in, and every session streams
      // until R + seconds: `seconds` at full concurrency after a ramp, as sessions arrive
      // in service rather than all in one instant (the VAD's lag, measured per message,
      // climbed to 400 ms in the first seconds after 1,000 sessions started at once, then
      // stayed at tens of ms). Decisions and CPU are also reported over the full-concurrency
      // window alone.
      // --start-within S: session i starts at a random moment of the first S seconds (people
      // who start talking together are not evenly spaced), each from its own point of the
      // recording; every session streams until S + seconds.
      const startAt = open.map(() => Math.random() * startWithinMs);
      const rampMs = startWithinMs || Number(args.get("ramp") ?? 0) * 1000;
      const phaseOf = (i: number) => (startWithinMs ? startAt[i]! : (i * rampMs) / open.length) + (aligned ? 0 : (i * frameMs) / open.length);
      const start = performance.now();
      let snapped = false;
      let nextPeak = start + 5000;
      const clientLag: number[] = [];
      let peak = before;
      let atFull: { at: number; stat: ReturnType<typeof procStat>; client: NodeJS.CpuUsage; nats: number } | null = null;
      let probing: Promise<string> | null = null;
      engineReports.length = 0;
      await new Promise<void>((resolve) => {
        const timer = setInterval(() => {
          const now = performance.now();
          for (let i = 0; i < open.length; i++) {
            const s = open[i]!;
            if (s.ws.readyState !== WebSocket.OPEN) continue;
            // frame k (from 1) is captured by start + phase + k × frameMs
            const due = Math.floor((now - start - phaseOf(i)) / frameMs);
            if (due <= 0 || (s.frames ?? 0) >= due) continue;
            clientLag.push(now - (start + phaseOf(i) + due * frameMs));
            while ((s.frames ?? 0) < due) {
              const from = (s.offset + s.sentBytes) % loopBytes.length;
              const frame = loopBytes.subarray(from, Math.min(loopBytes.length, from + frameBytes));
              if (openaiDoor) s.ws.send(toAppend(from, frame), { binary: false });
              else s.ws.send(native24 ? at24(from, frame) : frame);
              s.sentBytes += frame.length;
              s.frames = (s.frames ?? 0) + 1;
              s.sendLog.record(s.sentBytes, performance.now());
            }
          }
          if (!atFull && now - start >= rampMs) atFull = { at: now, stat: procStat(pids), client: process.cpuUsage(), nats: natsCpuSeconds() };
          if (probe && !probing && now - start >= rampMs + 3000) {
            probing = openOne(n).then((p) => {
              if (p.ws.readyState === WebSocket.OPEN) p.ws.close(1000);
              return p.refused ? `refused ${p.refused}, Retry-After ${p.retryAfter ?? "(none)"}` : p.sessionId || p.ws.readyState !== WebSocket.CLOSED ? "admitted" : `failed ${p.error ?? ""}`;
            });
          }
          if (now >= nextPeak) {
            peak = procStat(pids);
            nextPeak += 5000;
          }
          if (process.env.BENCH_HEAP_SNAPSHOT && !snapped && now - start >= (seconds * 1000) / 2) {
            snapped = true;
            for (const pid of pids) process.kill(pid, "SIGUSR2");
          }
          if (now - start >= rampMs + seconds * 1000) {
            clearInterval(timer);
            resolve();
          }
        }, 5);
      });
      peak = procStat(pids);
      // CPU over the streaming window alone: the averages below also cover the closes and
      // whatever backlog drains after them, which dilutes a saturated round
      const full = atFull ?? { at: start, stat: before, client: clientBefore, nats: natsBefore };
      const streamEndAt = performance.now();
      const streamedFor = (streamEndAt - full.at) / 1000;
      const clientUsed = process.cpuUsage(full.client);
      const streamCpu = {
        each: peak.each.map((e, i) => ((e.cpuSeconds - full.stat.each[i]!.cpuSeconds) / streamedFor) * 100),
        client: ((clientUsed.user + clientUsed.system) / 1e6 / streamedFor) * 100,
        nats: ((natsCpuSeconds() - full.nats) / streamedFor) * 100,
      };
      for (const s of open) if (s.ws.readyState === WebSocket.OPEN) s.ws.send(JSON.stringify({ type: "session.close" }));
      await Promise.race([Promise.all(open.map((s) => s.closed)), new Promise((r) => setTimeout(r, 60_000))]);
      // the gateway appends rt.session.closed after flushing a session's publishes
      for (let i = 0; i < 100 && open.some((s) => s.sessionId && !closedAudio.has(s.sessionId)); i++) await new Promise((r) => setTimeout(r, 100));
      const after = procStat(pids);

      // what the VAD has not handled and acked yet; its acks are cumulative, every 200 ms
      // at the latest, so a consumer that keeps up drains within a few of them
      const vadPendingNow = async () => {
        let pending = 0;
        for (let p = 0; p < base.realtime.vadPartitions; p++) {
          const info = await nats.jsm.consumers.info(`${prefix.toUpperCase()}_RT_AUDIO`, `vad_p${p}`).catch(() => null);
          pending += (info?.num_pending ?? 0) + (info?.num_ack_pending ?? 0);
        }
        return pending;
      };
      let vadPending = await vadPendingNow();
      for (let i = 0; i < 20 && vadPending > 0; i++) {
        await new Promise((r) => setTimeout(r, 100));
        vadPending = await vadPendingNow();
      }
      const closes = new Map<string, number>();
      let lostMs = 0;
      let held = 0;
      const pipeline: number[] = [];
      const decision: number[] = [];
      const decisionFull: number[] = [];
      const queued: number[] = [];
      const total: number[] = [];
      let completed = 0;
      let failed = 0;
      let streamed = 0;
      const firstPartial: number[] = [];
      /** worker_ms of the streamed finals: how long the decoder's `end` took (its backlog of audio, the lattice's best path) */
      const streamEnd: number[] = [];
      let longUtterances = 0;
      let longWithPartial = 0;
      for (const s of sessions) {
        const key = s.refused ? `refused ${s.refused}` : !s.sessionId ? `no session (${s.error ?? "no session.created"})` : s.close ? `${s.close.code}${s.close.reason ? ` ${s.close.reason}` : ""}` : "open";
        closes.set(key, (closes.get(key) ?? 0) + 1);
        const sentMs = Math.round(s.sentBytes / 32);
        const recorded = s.sessionId ? closedAudio.get(s.sessionId) : undefined;
        const lost = recorded === undefined ? sentMs : Math.max(0, sentMs - recorded);
        lostMs += lost;
        if (s.close?.code === 1000 && lost <= 1) held++;
        for (const e of s.events) {
          if (e.type === "input_audio_buffer.speech_stopped" && e.audio_end_ms !== undefined) {
            // the VAD can decide once silence_duration_ms (500) of silence after the last
            // voiced frame has arrived
            const sent = s.sendLog.sentAt(decisionOffset(e.audio_end_ms, 500));
            if (sent !== undefined) decision.push(e.t - sent);
            if (sent !== undefined && sent >= full.at) decisionFull.push(e.t - sent);
          }
          if (e.type.endsWith(".completed")) completed++;
          if (e.type.endsWith(".completed") && e.worker_id?.startsWith("stream:")) streamed++;
          if (e.type === "input_audio_buffer.committed" && e.audio_end_ms !== undefined && e.audio_start_ms !== undefined) {
            const started = s.events.find((x) => x.type === "input_audio_buffer.speech_started" && x.item_id === e.item_id);
            const partial = s.events.find((x) => x.item_id === e.item_id && ((x.type.endsWith(".delta") && (x.text ?? 0) > 0) || x.type.endsWith(".interim")));
            const stoppedAt = s.events.find((x) => x.type === "input_audio_buffer.speech_stopped" && x.item_id === e.item_id)?.t ?? Infinity;
            if (started && partial && partial.t < stoppedAt) firstPartial.push(partial.t - started.t);
            if (started && e.audio_end_ms - e.audio_start_ms > 2000) {
              longUtterances++;
              if (partial && partial.t - started.t <= 1000) longWithPartial++;
            }
          }
          if (e.type.endsWith(".failed")) failed++;
          if (!e.type.endsWith(".completed")) continue;
          const stopped = s.events.find((x) => x.type === "input_audio_buffer.speech_stopped" && x.item_id === e.item_id);
          if (!stopped) continue;
          total.push(e.t - stopped.t);
          if (e.worker_id?.startsWith("stream:")) streamEnd.push(e.worker_ms ?? 0);
          if (process.env.BENCH_DEBUG && e.t - stopped.t > 250) console.log("slow final", Math.round(e.t - stopped.t), "ms", e.worker_id, "worker_ms", e.worker_ms, "queue_ms", e.queue_ms, e.item_id);
          pipeline.push(e.t - stopped.t - (e.worker_ms ?? 0) - (e.queue_ms ?? 0));
          queued.push(e.queue_ms ?? 0);
        }
      }
      const abnormal = sessions.filter((s) => s.close && s.close.code !== 1000 && s.sessionId);
      if (abnormal.length && process.env.BENCH_DEBUG) {
        for (const s of abnormal.slice(0, 3)) console.log("abnormal close", s.close, s.error, "events", s.events.length, "last", s.events.at(-1)?.type, "closedAt", ((s.closedAt ?? 0) - start).toFixed(0), "sent ms", s.sentBytes / 32, "server saw", serverClose.get(s.sessionId!));
      }
      if (process.env.BENCH_DEBUG) console.log("stopped→transcript with engine, ms:", total.map((x) => x.toFixed(0)).join(" "));
      const commits = sessions.reduce((n, x) => n + x.events.filter((e) => e.type === "input_audio_buffer.committed").length, 0);
      const elapsed = (performance.now() - start) / 1000;
      const cpu = ((after.cpuSeconds - before.cpuSeconds) / elapsed) * 100;
      const clientCpu = process.cpuUsage(clientBefore);
      const others = `bench client ${(((clientCpu.user + clientCpu.system) / 1e6 / elapsed) * 100).toFixed(0)}%, nats-server ${(((natsCpuSeconds() - natsBefore) / elapsed) * 100).toFixed(0)}%`;
      console.log(
        [
          n,
          held,
          [...closes].map(([k, v]) => `${k}×${v}`).join(","),
          lostMs,
          vadPending,
          `${pct(decision, 50).toFixed(0)}/${pct(decision, 99).toFixed(0)} ms${rampMs ? ` (at full concurrency ${pct(decisionFull, 50).toFixed(0)}/${pct(decisionFull, 99).toFixed(0)} ms)` : ""} (client lag p99 ${pct(clientLag, 99).toFixed(0)} ms)`,
          `${pct(pipeline, 50).toFixed(0)}/${pct(pipeline, 99).toFixed(0)} ms`,
          `${pct(queued, 50).toFixed(0)}/${pct(queued, 99).toFixed(0)} ms`,
          `${pct(total, 50).toFixed(0)}/${pct(total, 99).toFixed(0)} ms`,
          `${completed}/${failed} of ${commits} (${((100 * completed) / Math.max(1, commits)).toFixed(1)}% transcribed, ${streamed} streamed)`,
          `first partial ${pct(firstPartial, 50).toFixed(0)}/${pct(firstPartial, 99).toFixed(0)} ms, ≤1 s in ${longWithPartial}/${longUtterances} utterances >2 s`,
          ((peak.rssMb - before.rssMb) / Math.max(1, open.length)).toFixed(3) +
            (split.length ? ` (${peak.each.map((e, i) => ((e.rssMb - before.each[i]!.rssMb) / Math.max(1, open.length)).toFixed(3)).join(" + ")})` : ""),
          `${cpu.toFixed(0)}%` + (split.length ? ` (${after.each.map((e, i) => (((e.cpuSeconds - before.each[i]!.cpuSeconds) / ((performance.now() - start) / 1000)) * 100).toFixed(0) + "%").join(" + ")})` : ""),
        ].join(" | "),
      );
      console.log(`  CPU of one core besides the server: ${others}`);
      const streaming = engineReports.filter((r) => r.t >= full.at && r.t <= streamEndAt);
      if (streaming.length) {
        const med = (f: (r: (typeof streaming)[number]) => number) => pct(streaming.map(f), 50);
        console.log(
          `  engine (VAD reports while streaming): speakers p50 ${med((r) => r.speakers)} max ${Math.max(...streaming.map((r) => r.speakers))}, decoders busy p50 ${med((r) => r.busy)} of ${streaming.at(-1)!.size}, load p50 ${(med((r) => r.load) * 100).toFixed(0)}% of the machine, cost per speaker ${(streaming.at(-1)!.per_speaker * availableParallelism()).toFixed(3)} cores (last)`,
        );
      }
      const refusals = sessions.filter((x) => x.refused).map((x) => `${x.refused} Retry-After ${x.retryAfter ?? "(none)"}`);
      if (refusals.length) console.log(`  refused: ${[...new Set(refusals)].map((r) => `${r} ×${refusals.filter((x) => x === r).length}`).join(", ")}`);
      if (streamEnd.length) console.log(`  streamed finals: the decoder's end (worker_ms) p50/p99 ${pct(streamEnd, 50).toFixed(0)}/${pct(streamEnd, 99).toFixed(0)} ms; ${total.length - streamEnd.length} finals from the commit path`);
      if (probing) console.log(`  one more speaker, 3 s after the last started: ${await probing}`);
      resultRows.push({
        engine: zeroEngine ? "zero" : "pocketsphinx",
        model: zeroEngine ? "none" : "en-us",
        door: openaiDoor ? "openai" : "native",
        sample_rate: openaiDoor || native24 ? 24000 : 16000,
        audio: audioSource,
        seconds,
        sessions: n,
        held,
        vad_decision_p50_ms: Math.round(pct(decision, 50)),
        vad_decision_p99_ms: Math.round(pct(decision, 99)),
        final_p50_ms: Math.round(pct(total, 50)),
        final_p99_ms: Math.round(pct(total, 99)),
        committed: commits,
        completed,
        failed,
        mb_per_session: Number(((peak.rssMb - before.rssMb) / Math.max(1, open.length)).toFixed(3)),
        server_cpu_pct: Math.round(cpu),
      });
      // BENCH_ROUNDS_OUT=<file>: each round's raw figures as a JSON line (bench/doors.ts pools them)
      if (process.env.BENCH_ROUNDS_OUT) {
        const line = { door: openaiDoor ? "openai" : native24 ? "native24" : "native", sessions: n, held, decisions: decision.map(Math.round), mbPerSession: (peak.rssMb - before.rssMb) / Math.max(1, open.length), serverCpu: cpu };
        appendFileSync(process.env.BENCH_ROUNDS_OUT, JSON.stringify(line) + "\n");
      }
      const sum = streamCpu.each.reduce((a, b) => a + b, 0);
      // server events the clients received in the same window, and the CPU per 100 sessions
      let eventsInWindow = 0;
      for (const s of sessions) for (const e of s.events) if (e.t >= full.at && e.t <= streamEndAt) eventsInWindow++;
      const per100 = (x: number) => ((x * 100) / Math.max(1, open.length)).toFixed(1);
      console.log(
        `  events to clients ${(eventsInWindow / streamedFor).toFixed(0)}/s; CPU per 100 sessions: server ${per100(sum)}%, with client and nats-server ${per100(sum + streamCpu.client + streamCpu.nats)}% of a core`,
      );
      console.log(
        `  CPU of one core while streaming${rampMs ? " at full concurrency" : ""}: server ${sum.toFixed(0)}% (${streamCpu.each.map((x) => x.toFixed(0) + "%").join(" + ")}), bench client ${streamCpu.client.toFixed(0)}%, nats-server ${streamCpu.nats.toFixed(0)}%, all ${(sum + streamCpu.client + streamCpu.nats).toFixed(0)}% of ${100 * availableParallelism()}%`,
      );
      // what the gateway's /metrics says about the same round (docs/operations.md "Metrics")
      const metricsAfter = await scrapeMetrics(baseUrl);
      const d = (name: string) => (metricsAfter.get(name) ?? 0) - (metricsBefore.get(name) ?? 0);
      const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);
      const closesByCode = new Map<string, number>();
      for (const s of sessions) if (s.close) closesByCode.set(String(s.close.code), (closesByCode.get(String(s.close.code)) ?? 0) + 1);
      const rows: [string, number, number][] = [
        ["sessions opened", sessions.filter((s) => s.sessionId).length, d("stt_realtime_sessions_opened_total")],
        ...[...closesByCode].map(([code, k]): [string, number, number] => [`closes ${code}`, k, d(`stt_realtime_session_closes_total{code="${code}"}`)]),
        ["audio frames", sessions.reduce((a, s) => a + (s.frames ?? 0), 0), d("stt_realtime_audio_frames_total")],
        // the gateway counts the bytes it received: 24 kHz ones from native --rate 24000 clients
        ["audio bytes", sessions.reduce((a, s) => a + s.sentBytes, 0) * (native24 ? 1.5 : 1), d("stt_realtime_audio_bytes_total")],
        ["VAD decisions", decision.length, d("stt_realtime_vad_decision_seconds_count")],
        ["VAD decision mean ms", mean(decision), (1000 * d("stt_realtime_vad_decision_seconds_sum")) / d("stt_realtime_vad_decision_seconds_count")],
        ["completed", completed, d('stt_realtime_transcripts_total{outcome="completed"}')],
        ["failed", failed, d('stt_realtime_transcripts_total{outcome="failed"}')],
        ["final mean ms", mean(total), (1000 * d("stt_realtime_final_seconds_sum")) / d("stt_realtime_final_seconds_count")],
      ];
      console.log(`  /metrics vs bench: ${rows.map(([k, b, m]) => `${k} ${Number.isInteger(b) ? b : b.toFixed(1)}/${Number.isInteger(m) ? m : m.toFixed(1)} (${b ? (((m - b) / b) * 100).toFixed(1) : "0.0"}%)`).join("; ")}`);
      await stopServer(proc);
      proc = undefined;
      await Promise.all(extras.map(stopServer));
      extras = [];
      await new Promise((r) => setTimeout(r, 1000));
    }
  } finally {
    if (proc) await stopServer(proc);
    await Promise.all(extras.map(stopServer));
    await nats.close();
    await deployment.destroy();
  }
  recordResults("realtime", resultRows);
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
