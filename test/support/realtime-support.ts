import { readFileSync } from "node:fs";
import WebSocket from "ws";
import { REALTIME_PATH } from "../../schemas/realtime";
import { createResampler } from "../../shared/audio/resample";
import { pcm16MonoFromWav } from "../../shared/audio/wav";
import { fixturePath } from "./fixtures";
import type { Config } from "../../shared/config";
import { createLogger } from "../../shared/logger";
import type { Limits } from "../../schemas/plans";
import { startRealtimeGateway, type RealtimeGateway } from "../../services/realtime-gateway/gateway";
import type { Stack } from "./stack";
import { noteReceived } from "./documented-messages";

/** A real WebSocket client for the realtime tests and the bench. */
export interface RtClient {
  ws: WebSocket;
  events: any[];
  /** Resolves with the next event of `type` not yet taken (or already received). */
  next(type: string, timeoutMs?: number): Promise<any>;
  closed: Promise<{ code: number; reason: string }>;
  sendAudio(bytes: Uint8Array): void;
  sendJson(value: unknown): void;
}

export const fixture = (name: string) => pcm16MonoFromWav(readFileSync(fixturePath(name)))!;

export function wsUrl(baseUrl: string, query = ""): string {
  return `${baseUrl.replace(/^http/, "ws")}${REALTIME_PATH}${query ? `?${query}` : ""}`;
}

/** `protocols`: the subprotocols offered (a browser's `openai-insecure-api-key.<secret>` goes here). */
export function connectRt(url: string, headers: Record<string, string> = {}, protocols: string[] = []): Promise<RtClient> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, protocols, { headers, maxPayload: 64 * 1024 * 1024 });
    const events: any[] = [];
    const taken = new Set<any>();
    const waiters: { type: string; resolve: (e: any) => void }[] = [];
    let resolveClosed!: (v: { code: number; reason: string }) => void;
    let closeInfo = "";
    const closed = new Promise<{ code: number; reason: string }>((r) => (resolveClosed = r));
    ws.on("message", (data, isBinary) => {
      if (isBinary) return;
      const e = JSON.parse(data.toString());
      noteReceived(url, e);
      e.__t = Date.now();
      events.push(e);
      const i = waiters.findIndex((w) => w.type === e.type);
      if (i >= 0) {
        taken.add(e);
        waiters.splice(i, 1)[0]!.resolve(e);
      }
    });
    ws.on("close", (code, reason) => {
      closeInfo = ` (socket closed ${code} ${reason.toString()})`;
      resolveClosed({ code, reason: reason.toString() });
    });
    ws.on("unexpected-response", (_req, res) => {
      let body = "";
      res.on("data", (c) => (body += c));
      res.on("end", () => reject(Object.assign(new Error(`upgrade refused ${res.statusCode}`), { status: res.statusCode, headers: res.headers, body: body ? JSON.parse(body) : null })));
    });
    ws.on("error", (err) => reject(err));
    ws.on("open", () =>
      resolve({
        ws,
        events,
        closed,
        next(type, timeoutMs = 20_000) {
          const have = events.find((e) => e.type === type && !taken.has(e));
          if (have) {
            taken.add(have);
            return Promise.resolve(have);
          }
          return new Promise((res, rej) => {
            const timer = setTimeout(() => rej(new Error(`timed out waiting for ${type}; got ${events.map((e) => e.type).join(", ")}${closeInfo}`)), timeoutMs);
            waiters.push({ type, resolve: (e) => (clearTimeout(timer), res(e)) });
          });
        },
        sendAudio: (bytes) => ws.send(bytes, { binary: true }),
        sendJson: (value) => ws.send(JSON.stringify(value)),
      }),
    );
  });
}

/** Expects the upgrade to be refused; returns status, headers and JSON body. */
export async function refusal(url: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Record<string, any>; body: any }> {
  try {
    const c = await connectRt(url, headers);
    c.ws.close();
    throw new Error("upgrade unexpectedly accepted");
  } catch (err) {
    const e = err as { status?: number; headers?: Record<string, any>; body?: any };
    if (e.status === undefined) throw err;
    return { status: e.status, headers: e.headers ?? {}, body: e.body };
  }
}

/**
 * Streams PCM16 at `speed` × real time in chunks of `chunkBytes` (the default is an odd
 * number of samples, so frames do not line up with the gateway's 10 ms steps; a frame
 * must hold whole samples, or the gateway drops it with an error event).
 */
export async function streamPcm(client: RtClient, pcm: Int16Array, options: { speed?: number; chunkBytes?: number } = {}): Promise<void> {
  const bytes = new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength);
  const chunk = options.chunkBytes ?? 3202;
  const speed = options.speed ?? 1;
  const start = Date.now();
  for (let off = 0; off < bytes.length; off += chunk) {
    if (client.ws.readyState !== WebSocket.OPEN) return;
    client.sendAudio(bytes.slice(off, off + chunk));
    if (speed !== Infinity) {
      const due = start + ((off + chunk) / 32 / speed);
      const wait = due - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
  }
}

export const silence = (seconds: number, rate = 16000) => new Int16Array(Math.round(seconds * rate));

/** 16 kHz PCM as the OpenAI door takes it: 24 kHz PCM16 in base64 appends of 40 ms, at `speed` × real time. */
export async function appendToOpenAiDoor(c: RtClient, pcm16k: Int16Array, speed = 4): Promise<void> {
  const pcm = createResampler(16000, 24000, 1).push(pcm16k);
  const bytes = Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength);
  const start = Date.now();
  for (let at = 0; at < bytes.length; at += 1920) {
    if (c.ws.readyState !== WebSocket.OPEN) return;
    c.sendJson({ type: "input_audio_buffer.append", audio: bytes.subarray(at, at + 1920).toString("base64") });
    const due = start + ((at + 1920) / 48_000 / speed) * 1000;
    if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
  }
}

/** Stack settings that keep a loaded machine from refusing upgrades by headroom (for tests of something else; docs/realtime-reference.md "Admission and shedding"). */
export const RELAXED_ADMISSION = { RT_ADMIT_MAX_ENGINE_SHARE: "1", RT_ADMIT_MAX_MACHINE_SHARE: "1", RT_ENGINE_SPEAKER_CORES: "0.001", RT_ADMIT_MAX_VAD_LAG_MS: "60000", RT_ADMIT_MAX_DECISION_MS: "60000", RT_ADMIT_MAX_LOOP_DELAY_MS: "60000" };

/** A realtime gateway on the stack whose demo backend holds `key` (RT_DEMO_API_KEY: issued keys exist only once the stack runs), serving the demo page and the playground. */
export function startDemoGateway(stack: Stack, key: string): Promise<RealtimeGateway> {
  const config = { ...stack.config, realtime: { ...stack.config.realtime, demoApiKey: key } };
  return startRealtimeGateway(
    { config, nats: stack.nats, sessions: stack.runtime.ctx.sessions, db: stack.db, keys: stack.runtime.ctx.keys, usage: stack.runtime.ctx.usage, logger: stack.runtime.ctx.logger, router: stack.runtime.ctx.router },
    { port: 0, host: "127.0.0.1", fetch: stack.runtime.ctx.slots.httpFetch },
  );
}

/**
 * Extra realtime gateways on a stack's NATS and Postgres, with tightened plan limits or
 * realtime settings, for tests that need a limit to trip quickly. stopAll() in afterAll.
 */
export function extraGateways(getStack: () => Stack) {
  const started: RealtimeGateway[] = [];
  return {
    async start(limits: Partial<Limits>, realtime: Partial<Config["realtime"]> = {}): Promise<string> {
      const stack = getStack();
      const config = { ...stack.config, realtime: { ...stack.config.realtime, ...realtime } };
      const g = await startRealtimeGateway(
        { config, nats: stack.nats, sessions: stack.runtime.ctx.sessions, db: stack.db, keys: stack.runtime.ctx.keys, usage: stack.runtime.ctx.usage, logger: createLogger("error"), router: stack.runtime.ctx.router },
        { port: 0, host: "127.0.0.1", limitsFor: (p) => ({ ...p.limits, ...limits }) },
      );
      started.push(g);
      return `http://127.0.0.1:${g.port}`;
    },
    async stopAll(): Promise<void> {
      for (const g of started.splice(0)) await g.stop().catch(() => undefined);
    },
  };
}
