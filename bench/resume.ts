import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createInterface } from "node:readline";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { startStack, type Stack } from "../test/support/stack";
import { forwardSessionEvents } from "../services/realtime-gateway/session-feed";
import { readSessionRecords } from "../services/realtime-gateway/session-records";
import type { ServerEvent } from "../schemas/realtime";
import { pct } from "./support/server";

/**
 * Resuming realtime sessions (issue 30, docs/realtime-resume.md):
 * `scripts/bench.sh resume` (needs NATS and Postgres, as the tests do). In-process on
 * the real stack:
 *
 * 1. Replay: a session's subject holds BENCH_EVENTS (1,000) stored server events and the
 *    VAD's resume answer; the time from starting a resumed connection's feed
 *    (session-feed.ts: ordered consumer, parse, stable ids) until the last replayed
 *    event is handed to the socket, and the time of the position check before the
 *    upgrade (a scan of the subject). Seven rounds, each on a new session.
 * 2. Memory: BENCH_CLIENTS (200) idle sessions opened by a client process of their own
 *    (bench/support/idle-clients.ts), so this heap holds only the server's side; the
 *    heap after a full collection with them open and idle, then with their TCP
 *    connections cut (each session held for its resume), per session.
 */
setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

const EVENTS = Number(process.env.BENCH_EVENTS ?? "1000");
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? "200");

async function replayRound(stack: Stack): Promise<{ replayMs: number; checkMs: number }> {
  const sessionId = `sess_${randomBytes(12).toString("hex")}`;
  const item = `item_${sessionId.slice(5, 17)}_00000000`;
  const partials = Array.from({ length: EVENTS }, (_, i) => ({
    event: { type: "conversation.item.input_audio_transcription.delta", event_id: "evt_x", item_id: item, content_index: 0, delta: ` word${i}` } as ServerEvent,
    at: i,
  }));
  await stack.runtime.ctx.sessions.appendPartials(sessionId, item, partials);
  await stack.runtime.ctx.sessions.appendDecided(sessionId, [{ event: { type: "rt.session.resumed", data: { session_id: sessionId, gen: 1, position: 0 } }, key: { kind: "control", seq: 2 ** 20 } }]);

  const t0 = performance.now();
  let sent = 0;
  await new Promise<void>((resolve, reject) => {
    const feed = forwardSessionEvents(
      stack.nats,
      sessionId,
      () => {
        if (++sent === EVENTS) {
          feed.unsubscribe();
          resolve();
        }
      },
      () => undefined,
      { gen: 1, afterEventId: null, waitMs: 5000, onResumed: () => undefined, onFailed: reject },
    );
  });
  const replayMs = performance.now() - t0;
  const t1 = performance.now();
  await readSessionRecords(stack.nats, sessionId, () => false, { waitMs: 0 });
  return { replayMs, checkMs: performance.now() - t1 };
}

function heapMb(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed / 1024 / 1024;
}

async function memory(stack: Stack) {
  const { key } = await stack.issueKey("pro", "bench-resume", { limits: { maxConcurrentConnections: CLIENTS + 10, maxConnectionsPerMinute: CLIENTS * 10 } });
  const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
  await pause(1000);
  const base = heapMb();
  const child = spawn(process.execPath, ["--import", "tsx", "bench/support/idle-clients.ts"], {
    env: { ...process.env, BENCH_URL: stack.baseUrl, BENCH_KEY: key, BENCH_CLIENTS: String(CLIENTS) },
    stdio: ["pipe", "pipe", "inherit"],
  });
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const expect = async (want: string) => {
    const { value } = await lines.next();
    if (value !== want) throw new Error(`idle clients said ${value}`);
  };
  await expect("open");
  await pause(2000);
  const open = heapMb();
  child.stdin!.write("cut\n");
  await expect("cut");
  await pause(3000); // the holds: audio settled, ownership entries written
  const held = heapMb();
  child.kill("SIGKILL");
  return { base, open, held };
}

// admission tuned for a bench that opens its sessions back to back
const stack = await startStack({ RT_STREAM_DECODERS: "0", LOG_LEVEL: "error", RT_ADMIT_BURST: "100000" });
try {
  await replayRound(stack); // warm-up (first consumer, JIT), not counted
  const rounds: { replayMs: number; checkMs: number }[] = [];
  for (let i = 0; i < 7; i++) rounds.push(await replayRound(stack));
  const replay = rounds.map((r) => r.replayMs);
  const check = rounds.map((r) => r.checkMs);
  console.log(`replay of ${EVENTS} stored events: median ${pct(replay, 50).toFixed(1)} ms, min ${Math.min(...replay).toFixed(1)}, max ${Math.max(...replay).toFixed(1)} (7 rounds)`);
  console.log(`position check (scan of the subject): median ${pct(check, 50).toFixed(1)} ms, max ${Math.max(...check).toFixed(1)}`);
  const m = await memory(stack);
  const perOpen = ((m.open - m.base) * 1024) / CLIENTS;
  const perHeld = ((m.held - m.base) * 1024) / CLIENTS;
  console.log(`heap: ${m.base.toFixed(1)} MB before, ${m.open.toFixed(1)} MB with ${CLIENTS} idle sessions open, ${m.held.toFixed(1)} MB with them held`);
  console.log(`per session: open and idle ${perOpen.toFixed(1)} KB, held ${perHeld.toFixed(1)} KB`);
} finally {
  await stack.stop();
}
