import WebSocket from "ws";
import { cpuSeconds, natsCpuSeconds, processTree, rssMb } from "./proc";
import { pct } from "./server";
import { createSendLog, decisionOffset } from "./vad-decision";
import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { machineFreeMeter } from "./proc";

/** A session's first this much audio: its decisions are also reported apart (the arrival's share of the latency). */
const EARLY_MS = 5000;

export interface RoundOptions {
  /** Sessions offered. */
  n: number;
  seconds: number;
  frameMs: number;
  /** Upgrades offered at once; the next batch goes when all of them are answered. */
  batch: number;
  /** The looped audio cut into frames of frameMs; sent as they are. */
  frames: Buffer[];
  url: string;
  authorization: string;
  /** The supervisor: the server is it and every process under it. */
  serverPid: number;
  /**
   * A refused user tries again after its Retry-After, as long as this many seconds have
   * not passed since the round began (0: one try each, as the issue's client).
   */
  retryWithinS: number;
}

export interface RoundFigures {
  offered: number;
  /** The machine's free cores (idle, I/O wait, niced) over the second before the round: how busy other work kept it. */
  freeCoresBefore: number | null;
  admitted: number;
  /** Admitted within the first 2 s of the round (a herd's figure: what the plane takes at once). */
  admittedWithin2s: number;
  /** Upgrades with no answer within UNANSWERED_AFTER_MS of their batch. */
  unanswered: number;
  /** Upgrades that ended without an HTTP answer (connection errors), by message. */
  failed: Map<string, number>;
  /** `<status> <error code>` → how many, and the Retry-After seconds seen. */
  refused: Map<string, { count: number; retryAfter: number[] }>;
  refusedCount: number;
  /** Retries made after a refusal's Retry-After, and the sessions admitted on one. */
  retries: number;
  admittedOnRetry: number;
  offerMs: number;
  answerMs: number[];
  /** Admitted sessions the server (or the connection) closed before the client sent session.close, by `<code> <reason>`. */
  earlyCloses: Map<string, number>;
  endCloses: Map<string, number>;
  noClose: number;
  /** `error` events received, by error.code. */
  serverErrors: Map<string, number>;
  decisions: number[];
  /** Of those, the decisions on each session's first EARLY_MS of audio (a herd's arrival shows there). */
  decisionsEarly: number[];
  decisionsLater: number[];
  noDecisions: number;
  unmatched: number;
  worstSessionP99: number;
  windowS: number;
  serverCpuPct: number;
  serverEach: { label: string; cpuPct: number }[];
  natsCpuPct: number;
  clientCpuPct: number;
  sendLateP99: number;
  rssBeforeMb: number;
  rssPeakMb: number;
}

interface Session {
  ws: WebSocket;
  offeredAt: number;
  answered: Promise<void>;
  openedAt?: number;
  refused?: string;
  failed?: string;
  /** Frames sent, and the next frame of the loop to send. */
  sent: number;
  next: number;
  log: ReturnType<typeof createSendLog>;
  silenceMs: number;
  decisions: number[];
  decisionsEarly: number[];
  decisionsLater: number[];
  unmatched: number;
  endedAt?: number;
  close?: string;
}

const UNANSWERED_AFTER_MS = 30_000;
const CLOSE_WAIT_MS = 60_000;
const TICK_MS = 5;
const CLOSE_MESSAGE = JSON.stringify({ type: "session.close" });

/** The server's processes now: CPU seconds, RSS and a label (its role where its command line or STT_SERVICES says one). */
export function serverSample(root: number) {
  const out = new Map<number, { cpu: number; rss: number; label: string }>();
  for (const pid of processTree(root)) {
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
      const services = /(?:^|\0)STT_SERVICES=([^\0]*)/.exec(readFileSync(`/proc/${pid}/environ`, "utf8"))?.[1];
      const role = argv.at(-1)?.replace(/^.*\//, "") ?? "?";
      out.set(pid, { cpu: cpuSeconds(pid), rss: rssMb(pid), label: `${pid} ${role}${services ? ` [${services}]` : ""}` });
    } catch {
      // ended while being read
    }
  }
  return out;
}

const sumRss = (s: ReturnType<typeof serverSample>) => [...s.values()].reduce((a, p) => a + p.rss, 0);

/**
 * One round: offer `n` sessions `batch` at a time, stream each admitted one in real time
 * for `seconds` from its open, end it with session.close, and measure (RoundFigures).
 * One timer every TICK_MS sends every session the frames it is due (its clock starts
 * at its open, so sessions are out of step as real clients are); a frame is a view of
 * the pre-cut loop, and the send log is typed arrays, so streaming allocates little.
 */
export async function measureRound(o: RoundOptions): Promise<RoundFigures> {
  const totalFrames = Math.round((o.seconds * 1000) / o.frameMs);
  const frameBytes = o.frames[0]!.length;
  const sessions: Session[] = [];
  const streaming: Session[] = [];
  // how late frames left against their due time, in 1 ms buckets (the last: ≥ 999 ms)
  const late = new Uint32Array(1000);
  const f: RoundFigures = {
    offered: o.n,
    freeCoresBefore: null,
    admitted: 0,
    admittedWithin2s: 0,
    unanswered: 0,
    failed: new Map(),
    refused: new Map(),
    refusedCount: 0,
    retries: 0,
    admittedOnRetry: 0,
    offerMs: 0,
    answerMs: [],
    earlyCloses: new Map(),
    endCloses: new Map(),
    noClose: 0,
    serverErrors: new Map(),
    decisions: [],
    decisionsEarly: [],
    decisionsLater: [],
    noDecisions: 0,
    unmatched: 0,
    worstSessionP99: NaN,
    windowS: 0,
    serverCpuPct: 0,
    serverEach: [],
    natsCpuPct: 0,
    clientCpuPct: 0,
    sendLateP99: NaN,
    rssBeforeMb: 0,
    rssPeakMb: 0,
  };
  const count = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1);

  const freeMeter = machineFreeMeter();
  await new Promise((r) => setTimeout(r, 1000));
  f.freeCoresBefore = freeMeter.take(availableParallelism());
  const before = serverSample(o.serverPid);
  const clientBefore = process.cpuUsage();
  const natsBefore = natsCpuSeconds();
  f.rssBeforeMb = f.rssPeakMb = sumRss(before);
  const start = performance.now();
  const rssTimer = setInterval(() => (f.rssPeakMb = Math.max(f.rssPeakMb, sumRss(serverSample(o.serverPid)))), 1000);

  let offering = true;
  let awaitingAnswer = 0;
  let retriesDue = 0;
  let offerEnd = Infinity;
  let streamingDone!: () => void;
  const streamed = new Promise<void>((resolve) => (streamingDone = resolve));
  const timer = setInterval(() => {
    const now = performance.now();
    for (let i = 0; i < streaming.length; i++) {
      const s = streaming[i]!;
      if (s.ws.readyState !== WebSocket.OPEN) {
        streaming[i--] = streaming[streaming.length - 1]!;
        streaming.pop();
        continue;
      }
      // frame k (from 1) holds the audio captured by openedAt + k × frameMs
      const due = Math.min(totalFrames, Math.floor((now - s.openedAt!) / o.frameMs));
      if (s.sent < due) late[Math.min(999, Math.floor(now - s.openedAt! - due * o.frameMs))]!++;
      while (s.sent < due) {
        s.ws.send(o.frames[s.next]!);
        s.next = (s.next + 1) % o.frames.length;
        s.sent++;
        s.log.record(s.sent * frameBytes, performance.now());
      }
      if (s.sent >= totalFrames) {
        s.ws.send(CLOSE_MESSAGE);
        s.endedAt = now;
        streaming[i--] = streaming[streaming.length - 1]!;
        streaming.pop();
      }
    }
    if (!offering && retriesDue === 0 && streaming.length === 0 && (awaitingAnswer === 0 || now > offerEnd + UNANSWERED_AFTER_MS)) streamingDone();
  }, TICK_MS);

  const offer = (attempt = 1): Session => {
    const ws = new WebSocket(o.url, {
      headers: { authorization: o.authorization },
      // A zero masking key (RFC 6455 lets the client pick any) makes masking a no-op in
      // ws, as in the issue's measurement: the client shares the machine's cores.
      generateMask: (mask: Buffer) => void mask.fill(0),
    });
    const s: Session = { ws, offeredAt: performance.now(), answered: undefined as never, sent: 0, next: Math.floor(Math.random() * o.frames.length), log: createSendLog(totalFrames + 1), silenceMs: 500, decisions: [], decisionsEarly: [], decisionsLater: [], unmatched: 0 };
    s.answered = new Promise<void>((resolve) => {
      awaitingAnswer++;
      const answer = () => {
        awaitingAnswer--;
        f.answerMs.push(performance.now() - s.offeredAt);
        resolve();
      };
      ws.once("open", () => {
        s.openedAt = performance.now();
        f.admitted++;
        if (s.openedAt - start <= 2000) f.admittedWithin2s++;
        if (attempt > 1) f.admittedOnRetry++;
        streaming.push(s);
        answer();
      });
      ws.once("unexpected-response", (_req, res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          let code = "";
          try {
            code = (JSON.parse(Buffer.concat(chunks).toString()) as { error: { code: string } }).error.code;
          } catch {
            // not the service's JSON envelope: the status alone
          }
          s.refused = `${res.statusCode} ${code}`.trim();
          const entry = f.refused.get(s.refused) ?? { count: 0, retryAfter: [] };
          entry.count++;
          f.refusedCount++;
          const retry = Number(res.headers["retry-after"]);
          if (res.headers["retry-after"] !== undefined && Number.isFinite(retry)) entry.retryAfter.push(retry);
          f.refused.set(s.refused, entry);
          if (Number.isFinite(retry) && performance.now() + retry * 1000 - start < o.retryWithinS * 1000) {
            retriesDue++;
            setTimeout(() => {
              retriesDue--;
              f.retries++;
              offer(attempt + 1);
            }, retry * 1000);
          }
          answer();
          // the answer is read: let the socket go (ws then reports an error and a close, ignored)
          ws.terminate();
        });
      });
      ws.on("error", (err) => {
        if (s.openedAt !== undefined || s.refused) return;
        s.failed = err.message;
        count(f.failed, err.message);
        answer();
      });
    });
    ws.on("close", (code, reason) => {
      if (s.openedAt === undefined) return;
      s.close = `${code}${reason.length ? ` ${reason.toString()}` : ""}`;
      count(s.endedAt === undefined ? f.earlyCloses : f.endCloses, s.close);
    });
    ws.on("message", (data: Buffer, isBinary) => {
      if (isBinary) return;
      const t = performance.now();
      const text = data.toString();
      if (text.includes('"input_audio_buffer.speech_stopped"')) {
        const e = JSON.parse(text) as { audio_end_ms?: number };
        if (e.audio_end_ms === undefined) return;
        const sentAt = s.log.sentAt(decisionOffset(e.audio_end_ms, s.silenceMs));
        if (sentAt !== undefined) {
          s.decisions.push(t - sentAt);
          (e.audio_end_ms < EARLY_MS ? s.decisionsEarly : s.decisionsLater).push(t - sentAt);
        }
        // after session.close the open utterance ends with the audio, no VAD decision
        else if (s.endedAt === undefined) s.unmatched++;
      } else if (text.includes('"session.created"')) {
        const silence = (JSON.parse(text) as { turn_detection?: { silence_duration_ms?: number } }).turn_detection?.silence_duration_ms;
        if (silence !== undefined) s.silenceMs = silence;
      } else if (text.includes('"type":"error"')) {
        count(f.serverErrors, (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? "?");
      }
    });
    sessions.push(s);
    return s;
  };

  for (let i = 0; i < o.n; i += o.batch) {
    const answers = Array.from({ length: Math.min(o.batch, o.n - i) }, () => offer().answered);
    let timeout: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(answers), new Promise((r) => (timeout = setTimeout(r, UNANSWERED_AFTER_MS)))]);
    clearTimeout(timeout);
  }
  offering = false;
  offerEnd = performance.now();
  f.offerMs = offerEnd - start;
  await streamed;
  clearInterval(timer);

  // the figures over the round up to the last session's end, before the closes' work
  const after = serverSample(o.serverPid);
  f.windowS = (performance.now() - start) / 1000;
  const share = (cpuS: number) => (cpuS / f.windowS) * 100;
  f.serverEach = [...after].map(([pid, p]) => ({ label: p.label, cpuPct: share(p.cpu - (before.get(pid)?.cpu ?? 0)) }));
  f.serverCpuPct = f.serverEach.reduce((a, p) => a + p.cpuPct, 0);
  f.natsCpuPct = share(natsCpuSeconds() - natsBefore);
  const client = process.cpuUsage(clientBefore);
  f.clientCpuPct = share((client.user + client.system) / 1e6);
  f.rssPeakMb = Math.max(f.rssPeakMb, sumRss(after));
  clearInterval(rssTimer);

  const admitted = sessions.filter((s) => s.openedAt !== undefined);
  let closeTimeout: NodeJS.Timeout | undefined;
  const closed = (s: Session) => new Promise<void>((resolve) => (s.close !== undefined || s.ws.readyState === WebSocket.CLOSED ? resolve() : s.ws.once("close", () => resolve())));
  await Promise.race([Promise.all(admitted.map(closed)), new Promise((r) => (closeTimeout = setTimeout(r, CLOSE_WAIT_MS)))]);
  clearTimeout(closeTimeout);
  for (const s of sessions) {
    if (s.openedAt !== undefined && s.close === undefined) f.noClose++;
    if (s.openedAt === undefined && !s.refused && !s.failed) f.unanswered++;
    if (s.ws.readyState !== WebSocket.CLOSED) s.ws.terminate();
  }
  const perSessionP99: number[] = [];
  for (const s of admitted) {
    f.unmatched += s.unmatched;
    if (!s.decisions.length) f.noDecisions++;
    else perSessionP99.push(pct(s.decisions, 99));
    for (const d of s.decisions) f.decisions.push(d);
    for (const d of s.decisionsEarly) f.decisionsEarly.push(d);
    for (const d of s.decisionsLater) f.decisionsLater.push(d);
  }
  f.worstSessionP99 = perSessionP99.length ? Math.max(...perSessionP99) : NaN;
  const lateTotal = late.reduce((a, b) => a + b, 0);
  for (let i = 0, seen = 0; i < late.length; i++) {
    seen += late[i]!;
    if (seen >= 0.99 * lateTotal) {
      f.sendLateP99 = i;
      break;
    }
  }
  return f;
}
