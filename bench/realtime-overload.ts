/**
 * The realtime plane under overload, measured as an independent user would (issue 25's
 * acceptance): the service started as ./scripts/start.sh starts it (`bin/stt
 * supervise`, whatever layout that gives), its own NATS prefix, Postgres schema, data
 * dir and port, the zero-cost engine (bench/support/zero-engine.ts, so the plane is
 * measured apart from engine capacity), and plain `ws` clients in this one process.
 *
 *   npx tsx bench/realtime-overload.ts [--sessions 1,1000,2000] [--seconds 60]
 *        [--frame-ms 40] [--batch 50] [--env STT_LAYOUT=auto,LOG_LEVEL=warn]
 *        [--key-limits '{"maxConcurrentConnections": 10}'] [--retry-within 0]
 *        [--herd] [--one-try]
 *
 * Each round offers its sessions 50 at a time, each batch as soon as every upgrade of
 * the one before has been answered (accepted or refused), no ramp. An admitted session
 * streams jfk.wav looped with 1.5 s of silence, in real time from its open, for
 * `--seconds`, then sends `session.close` and waits for the server's close. One server
 * serves every round; the first round (1 session) is the baseline.
 *
 * Per round it prints: offered, admitted, refused (by status and error code, with the
 * Retry-After values seen), sessions the server closed before the client's own end (by
 * code and reason; the acceptance wants none), sessions with no VAD decision at all,
 * the VAD decision latency (speech_stopped received − the moment the client sent the
 * audio that let the VAD decide: end of speech + the session's silence_duration_ms,
 * bench/support/vad-decision.ts as in bench/realtime.ts) p50/p99 over every decision
 * and the same minus the baseline's p50, the worst session's own p99, the CPU of the
 * server's processes (all of them under the supervisor, summed), of nats-server and of
 * this client over the round, and the server's RSS growth per admitted session.
 *
 * `--retry-within S`: a refused user offers its session again after the refusal's
 * Retry-After, while the round is younger than S seconds (as clients that honour
 * Retry-After do); 0 (the default): one try each.
 *
 * `--herd`: every session of a round is offered at once (one batch, no ramp), as a
 * crowd of independent users arriving together (issue 43). `--one-try`: a herd whose
 * users try once each (`--retry-within 0`). A herd round also prints how many were
 * admitted within the first 2 s of the round.
 *
 * `--env` passes variables to the server (a comma starts a new one only before NAME=,
 * so a value may hold commas). The server's log goes to /tmp/stt-overload-<id>.log.
 */
import { availableParallelism } from "node:os";
import { BenchDeployment } from "./support/deployment";
import { speechLoop } from "./support/clips";
import { pct, startZeroEngine } from "./support/server";
import { startSupervised } from "./support/supervised";
import { measureRound, serverSample, type RoundFigures } from "./support/overload-round";

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i++) {
  const name = process.argv[i]!.replace(/^--/, "");
  const value = process.argv[i + 1];
  // a flag without a value (--herd, --one-try) stands for "1"
  if (value === undefined || value.startsWith("--")) args.set(name, "1");
  else args.set(name, value), i++;
}
const rounds = (args.get("sessions") ?? "1,1000,2000").split(",").map(Number);
const seconds = Number(args.get("seconds") ?? 60);
const frameMs = Number(args.get("frame-ms") ?? 40);
const oneTry = args.has("one-try");
// --herd: a round's sessions all offered at once (--one-try: a herd that tries once each)
const herd = oneTry || args.has("herd");
const batch = herd ? Infinity : Number(args.get("batch") ?? 50);
// --retry-within S: a refused user tries again after Retry-After while the round is younger than S seconds
const retryWithinS = oneTry ? 0 : Number(args.get("retry-within") ?? 0);
const extraEnv = Object.fromEntries(
  (args.get("env") ?? "")
    .split(/,(?=[A-Za-z_][A-Za-z0-9_]*=)/)
    .filter(Boolean)
    .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
);

// --key-limits '{"maxConcurrentConnections": 10}': the key's own limits instead (e.g. to see its refusals)
const keyLimits = JSON.parse(args.get("key-limits") ?? "{}") as Record<string, number>;

if (!process.env.NATS_URL || !process.env.DATABASE_URL) throw new Error("NATS_URL and DATABASE_URL must be set (source scripts/setup.sh, or run scripts/bench.sh realtime-overload)");
const deployment = new BenchDeployment("ov");
const logFile = `/tmp/stt-overload-${deployment.id}.log`;

async function main() {
  const engine = await startZeroEngine();
  const env = deployment.env({
    // a process without the gateway serves /metrics on a port of its own: a free one,
    // not 9464, which other servers on this machine may hold
    METRICS_PORT: "0",
    WORKER_EMBEDDED: "none",
    WORKER_OPENAI_URL: engine.url,
    WORKER_OPENAI_CONCURRENCY: "256",
    WORKER_OPENAI_REAL_TIME_FACTOR: "0.5",
    RT_TRANSCRIBE_CONCURRENCY: "256",
    RT_STREAM_DECODERS: "0",
    ...extraEnv,
  });
  let server: Awaited<ReturnType<typeof startSupervised>> | undefined;
  let stopped = false;
  const cleanUp = async () => {
    if (stopped) return;
    stopped = true;
    await server?.stop();
    engine.proc.kill();
    await deployment.destroy();
  };
  process.once("SIGINT", () => void cleanUp().finally(() => process.exit(130)));
  try {
    server = await startSupervised(env, logFile);
    const key = await issueKey(server.baseUrl);
    const extra = Object.entries(extraEnv).map(([k, v]) => `${k}=${v}`).join(" ");
    console.log(`realtime overload bench: bin/stt supervise on ${server.baseUrl}${extra ? ` with ${extra}` : ""}, zero-cost engine, log ${logFile}`);
    console.log(`server processes: ${[...serverSample(server.pid).values()].map((p) => p.label).join(", ")}`);
    console.log(`${seconds} s of jfk.wav (+1.5 s silence, looped) per admitted session in ${frameMs} ms frames, offered ${herd ? "all at once (a herd)" : `${batch} at a time`}${retryWithinS ? `, retrying after Retry-After within ${retryWithinS} s` : ", one try each"}, rounds ${rounds.join(", ")} on one server`);
    const frameSamples = (16000 * frameMs) / 1000;
    const loop = speechLoop("jfk", frameSamples);
    // the loop cut into frames once: every send is a view, never a copy
    const whole = Buffer.from(loop.buffer, loop.byteOffset, loop.byteLength);
    const frames = Array.from({ length: loop.length / frameSamples }, (_, i) => whole.subarray(i * frameSamples * 2, (i + 1) * frameSamples * 2));
    const results: RoundFigures[] = [];
    for (const n of rounds) {
      const restartsBefore = server.restarts();
      const r = await measureRound({ n, seconds, frameMs, batch: Math.min(batch, n), frames, url: `ws://127.0.0.1:${server.port}/v1/audio/transcriptions/stream`, authorization: `Bearer ${key}`, serverPid: server.pid, retryWithinS });
      results.push(r);
      printRound(r, results[0]!, server.restarts() - restartsBefore);
      // the closes' after-work (flushes, projections) settles before the next round
      await new Promise((r) => setTimeout(r, 5000));
    }
    printSummary(results);
  } finally {
    await cleanUp();
  }
}

/** One key for every session, its plan's limits raised so only the server's own capacity refuses. */
function issueKey(baseUrl: string): Promise<string> {
  const limits = { maxConcurrentConnections: 1_000_000, maxConnectionsPerMinute: 1_000_000, maxConcurrentUtterances: 1_000_000, maxAudioSecondsPerWindow: 1_000_000_000, ...keyLimits };
  return deployment.issueKey(baseUrl, "overload-bench", { limits });
}

const ms = (x: number) => (Number.isFinite(x) ? `${x.toFixed(0)} ms` : "–");
const signed = (x: number) => (Number.isFinite(x) ? `${x >= 0 ? "+" : ""}${x.toFixed(0)}` : "–");
const list = (m: Map<string, number>) => (m.size ? [...m].map(([k, v]) => `${k} ×${v}`).join(", ") : "none");

function printRound(r: RoundFigures, baseline: RoundFigures, restarts: number): void {
  const p50 = pct(r.decisions, 50);
  const p99 = pct(r.decisions, 99);
  const base50 = pct(baseline.decisions, 50);
  console.log(`\nround: ${r.offered} sessions offered in ${Math.ceil(r.offered / Math.min(batch, r.offered))} batch(es) over ${(r.offerMs / 1000).toFixed(1)} s; upgrade answered p50/p99 ${ms(pct(r.answerMs, 50))}/${ms(pct(r.answerMs, 99))}`);
  console.log(`  machine before the round: ${r.freeCoresBefore === null ? "–" : r.freeCoresBefore.toFixed(2)} of ${availableParallelism()} cores free (idle, I/O wait, niced)`);
  console.log(`  admitted ${r.admitted}, refused ${r.refusedCount}, no answer ${r.unanswered}${r.failed.size ? `, failed: ${list(r.failed)}` : ""}${retryWithinS ? `; ${r.retries} retries after Retry-After within ${retryWithinS} s, ${r.admittedOnRetry} admitted on one` : ""}`);
  console.log(`  refused: ${r.refused.size ? [...r.refused].map(([k, v]) => `${k} ×${v.count}${v.retryAfter.length ? ` (Retry-After ${Math.min(...v.retryAfter)}–${Math.max(...v.retryAfter)} s)` : " (no Retry-After)"}`).join(", ") : "none"}`);
  console.log(`  closed by the server before the client's end: ${list(r.earlyCloses)}; after session.close: ${list(r.endCloses)}${r.noClose ? `; no close within 60 s of session.close: ${r.noClose}` : ""}`);
  if (r.serverErrors.size) console.log(`  error events: ${list(r.serverErrors)}`);
  console.log(
    `  VAD decisions: ${r.decisions.length} in ${r.admitted - r.noDecisions} sessions, no decisions in ${r.noDecisions}${r.unmatched ? `, ${r.unmatched} ahead of the audio sent` : ""}; p50/p99 ${ms(p50)}/${ms(p99)}, over the baseline's p50 (${ms(base50)}) ${signed(p50 - base50)}/${signed(p99 - base50)} ms; worst session p99 ${ms(r.worstSessionP99)}`,
  );
  const procs = r.serverEach.filter((p) => p.cpuPct >= 0.5).map((p) => `${p.label} ${p.cpuPct.toFixed(0)}%`);
  console.log(
    `  CPU over ${r.windowS.toFixed(1)} s (% of one core): server ${r.serverCpuPct.toFixed(0)}%${procs.length ? ` (${procs.join(" + ")})` : ""}, nats-server ${r.natsCpuPct.toFixed(0)}%, bench client ${r.clientCpuPct.toFixed(0)}% (frames sent late p99 ${ms(r.sendLateP99)})${restarts ? `; the supervisor restarted its child ${restarts}×: CPU and RSS miss the dead process` : ""}`,
  );
  if (herd) {
    const closed = [...r.earlyCloses.values()].reduce((a, b) => a + b, 0);
    console.log(`  herd: admitted in the first 2 s ${r.admittedWithin2s} of ${r.offered}, admitted in all ${r.admitted}, refused ${r.refusedCount}, closed by the server ${closed}; VAD decision p50/p99 ${ms(p50)}/${ms(p99)} (${signed(p50 - base50)}/${signed(p99 - base50)} ms over one session)`);
    const early = r.decisionsEarly;
    if (early.length) console.log(`  decisions on each session's first 5 s of audio: ${early.length}, p50/p99 ${ms(pct(early, 50))}/${ms(pct(early, 99))}; on the rest: p99 ${ms(pct(r.decisionsLater, 99))}`);
  }
  console.log(`  server RSS ${r.rssBeforeMb.toFixed(0)} → peak ${r.rssPeakMb.toFixed(0)} MB: ${r.admitted ? ((r.rssPeakMb - r.rssBeforeMb) / r.admitted).toFixed(3) : "–"} MB per admitted session`);
}

function printSummary(results: RoundFigures[]): void {
  const base50 = pct(results[0]!.decisions, 50);
  console.log("\noffered | admitted (in the first 2 s) | refused | closed by server | no decisions | VAD p50/p99 | over baseline p50 | worst session p99 | server CPU | nats-server CPU | client CPU | MB/session");
  for (const r of results) {
    const p50 = pct(r.decisions, 50);
    const p99 = pct(r.decisions, 99);
    console.log(
      [
        r.offered,
        `${r.admitted} (${r.admittedWithin2s})`,
        r.refusedCount,
        [...r.earlyCloses.values()].reduce((a, b) => a + b, 0),
        r.noDecisions,
        `${ms(p50)}/${ms(p99)}`,
        `${signed(p50 - base50)}/${signed(p99 - base50)} ms`,
        ms(r.worstSessionP99),
        `${r.serverCpuPct.toFixed(0)}%`,
        `${r.natsCpuPct.toFixed(0)}%`,
        `${r.clientCpuPct.toFixed(0)}%`,
        r.admitted ? ((r.rssPeakMb - r.rssBeforeMb) / r.admitted).toFixed(3) : "–",
      ].join(" | "),
    );
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
