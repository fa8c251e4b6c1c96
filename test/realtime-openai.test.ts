import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { OpenAIRealtimeWS as BetaRealtimeWS } from "openai/beta/realtime/ws";
import { OpenAIRealtimeWS } from "openai/realtime/ws";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { openAiServerEvent, OPENAI_REALTIME_PATH } from "../schemas/openai-realtime";
import { fixturePath } from "./support/fixtures";
import { connectRt, extraGateways, RELAXED_ADMISSION, refusal } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";

/**
 * The OpenAI Realtime door (`WS /v1/realtime`) on the real stack (NATS, Postgres, the
 * PocketSphinx engine and its streaming decoders), driven by the unmodified `openai`
 * SDK 6 classes (GA and beta) and, for hostile input, a raw WebSocket.
 */
let stack: Stack;
let key: string;
let client: OpenAI;
let dir: string;
/** jfk.wav as 24 kHz PCM16 (audio/pcm) and as 8 kHz µ-law (audio/pcmu), made with ffmpeg. */
let pcm24: Buffer;
let ulaw: Buffer;

// SDK 6 always builds a wss:// URL: the socket is opened in plain TCP underneath (openai-realtime-notes.md §4)
const plain = { createConnection: ((o: { port: number; host: string }) => net.connect(o.port, o.host)) as never };
const T = "conversation.item.input_audio_transcription";
const JFK_WORDS = /\b(ask|not|what|your|country|can|do|for|you|fellow|americans?)\b/gi;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "oai-door-"));
  // ffmpeg (the service's own dependency; sox is not installed here) does the telephone's encoding, not our decoder
  const convert = (out: string, ...args: string[]) => execFileSync("ffmpeg", ["-v", "error", "-i", fixturePath("jfk.wav"), "-ac", "1", ...args, join(dir, out)]);
  convert("jfk24.raw", "-ar", "24000", "-f", "s16le");
  convert("jfk.ul", "-ar", "8000", "-f", "mulaw");
  pcm24 = readFileSync(join(dir, "jfk24.raw"));
  ulaw = readFileSync(join(dir, "jfk.ul"));
  // this file tests the door, not admission by headroom (domain/sessions/admission.test.ts):
  // the machine's load must not refuse its upgrades (503 "the engine cannot take another speaker")
  stack = await startStack({ RT_STREAM_DECODERS: "4", ...RELAXED_ADMISSION });
  key = (await stack.issueKey("pro")).key;
  client = new OpenAI({ apiKey: key, baseURL: `${stack.baseUrl}/v1`, maxRetries: 0 });
});
const gateways = extraGateways(() => stack);
afterAll(async () => {
  await gateways.stopAll();
  await stack?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

type AnyRt = { on(type: "event", l: (e: any) => void): void; send(e: any): void; socket: { once(ev: string, l: (...a: any[]) => void): void; readyState: number }; close(): void };

/** Every event the client receives, and a wait for one matching. */
function record(rt: AnyRt) {
  const events: any[] = [];
  rt.on("event", (e) => events.push(e));
  const until = async (done: (events: any[]) => boolean, timeoutMs = 90_000) => {
    const deadline = Date.now() + timeoutMs;
    while (!done(events)) {
      if (Date.now() > deadline) throw new Error(`timed out; got ${events.map((e) => e.type).join(", ")}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  return { events, until };
}
const opened = (rt: AnyRt) => new Promise<void>((resolve, reject) => (rt.socket.once("open", () => resolve()), rt.socket.once("error", reject)));
const allDone = (events: any[]) => {
  const items = events.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
  const done = events.filter((e) => e.type === `${T}.completed` || e.type === `${T}.failed`).map((e) => e.item_id);
  return items.length > 0 && items.every((i: string) => done.includes(i));
};
/** Sends `bytes` as base64 appends of `chunk` bytes, paced at `bytesPerSecond` (Infinity: at once). */
async function appendPaced(rt: AnyRt, bytes: Buffer, chunk: number, bytesPerSecond: number) {
  const start = Date.now();
  for (let at = 0; at < bytes.length; at += chunk) {
    rt.send({ type: "input_audio_buffer.append", audio: bytes.subarray(at, at + chunk).toString("base64") });
    if (bytesPerSecond === Infinity) continue;
    const wait = start + ((at + chunk) * 1000) / bytesPerSecond - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }
}
const words = (text: string) => (text.match(JFK_WORDS) ?? []).map((w) => w.toLowerCase());

describe("the OpenAI Realtime door with the unmodified openai SDK", () => {
  it("GA, server VAD, real-time pace: session events in OpenAI's shapes, deltas before completed, a JFK transcript", async () => {
    const rt = new OpenAIRealtimeWS({ model: "gpt-4o-transcribe", options: plain }, client);
    const { events, until } = record(rt);
    rt.on("error", (e) => events.push({ type: "sdk_error", e }));
    await opened(rt);
    expect(rt.url.toString()).toContain("/v1/realtime?model=gpt-4o-transcribe");
    rt.send({ type: "session.update", event_id: "cfg1", session: { type: "transcription", audio: { input: { format: { type: "audio/pcm", rate: 24000 }, transcription: { model: "gpt-4o-transcribe", language: "en" }, turn_detection: { type: "server_vad", threshold: 0.5, prefix_padding_ms: 300, silence_duration_ms: 500 } } } } });
    await until((ev) => ev.some((e) => e.type === "session.updated"));
    await appendPaced(rt, pcm24, 4800, 48000); // 100 ms appends in real time
    await appendPaced(rt, Buffer.alloc(48000 * 2), 4800, 48000); // 2 s of silence ends the turn
    await until(allDone);
    rt.close();

    for (const e of events) expect(openAiServerEvent.safeParse(e).success, JSON.stringify(e).slice(0, 300)).toBe(true);
    expect(events[0]).toMatchObject({ type: "session.created", session: { type: "transcription", object: "realtime.transcription_session", audio: { input: { format: { type: "audio/pcm", rate: 24000 } } } } });
    expect(events.find((e) => e.type === "session.updated").session.audio.input).toMatchObject({ transcription: { model: "gpt-4o-transcribe", language: "en" }, turn_detection: { type: "server_vad", threshold: 0.5, silence_duration_ms: 500 } });
    const types = events.map((e) => e.type);
    const first = events.find((e) => e.type === "input_audio_buffer.committed");
    const at = (type: string, item: string) => events.findIndex((e) => e.type === type && (e.item_id ?? e.item?.id) === item);
    expect(at("input_audio_buffer.speech_started", first.item_id)).toBeLessThan(at("input_audio_buffer.committed", first.item_id));
    expect(at("input_audio_buffer.committed", first.item_id)).toBeLessThan(at("conversation.item.added", first.item_id));
    expect(at("conversation.item.added", first.item_id)).toBeLessThan(at("conversation.item.done", first.item_id));
    expect(first.previous_item_id).toBeNull();
    const completed = events.filter((e) => e.type === `${T}.completed`);
    for (const c of completed) {
      expect(c).toMatchObject({ content_index: 0, usage: { type: "duration", seconds: expect.any(Number) } });
      expect(events.filter((e) => e.type === `${T}.completed` && e.item_id === c.item_id)).toHaveLength(1);
    }
    const deltas = events.filter((e) => e.type === `${T}.delta`);
    expect(deltas.length).toBeGreaterThan(0);
    expect(types.indexOf(`${T}.delta`)).toBeLessThan(types.indexOf(`${T}.completed`));
    const transcript = completed.map((c) => c.transcript).join(" ");
    console.log(`GA server_vad: ${completed.length} item(s), ${deltas.length} deltas: ${transcript}`);
    expect(new Set(words(transcript)).size).toBeGreaterThanOrEqual(3);
    expect(events.some((e) => e.type === "sdk_error")).toBe(false);
  }, 120_000);

  it("GA, manual commit (turn_detection null): a short commit is refused; the buffer is one item, no VAD events", async () => {
    const rt = new OpenAIRealtimeWS({ model: "whisper-1", options: plain }, client);
    const { events, until } = record(rt);
    const errors: any[] = [];
    rt.on("error", (e) => errors.push(e));
    await opened(rt);
    rt.send({ type: "session.update", session: { type: "transcription", audio: { input: { turn_detection: null } } } });
    await until((ev) => ev.some((e) => e.type === "session.updated"));
    rt.send({ type: "input_audio_buffer.append", audio: pcm24.subarray(0, 2400).toString("base64") }); // 50 ms
    rt.send({ type: "input_audio_buffer.commit", event_id: "early" });
    await until(() => errors.length > 0);
    expect(errors[0].error).toMatchObject({ type: "invalid_request_error", code: "input_audio_buffer_commit_empty", param: null, event_id: "early" });
    await appendPaced(rt, pcm24.subarray(2400), 48000, Infinity);
    rt.send({ type: "input_audio_buffer.commit", event_id: "c1" });
    await until(allDone);
    rt.close();
    expect(events.find((e) => e.type === "session.updated").session.audio.input.turn_detection).toBeNull();
    expect(events.some((e) => e.type.startsWith("input_audio_buffer.speech_"))).toBe(false);
    const committed = events.filter((e) => e.type === "input_audio_buffer.committed");
    expect(committed).toHaveLength(1);
    const types = events.map((e) => e.type);
    expect(types.indexOf("input_audio_buffer.committed")).toBeLessThan(types.indexOf(`${T}.completed`));
    const done = events.find((e) => e.type === `${T}.completed`);
    console.log(`GA manual: ${done.transcript} (${done.usage.seconds} s)`);
    expect(done.usage.seconds).toBeGreaterThan(10);
    expect(new Set(words(done.transcript)).size).toBeGreaterThanOrEqual(3);
  }, 120_000);

  it("beta class (OpenAI-Beta header), G.711 µ-law made with ffmpeg, manual commit, logprobs", async () => {
    const rt = new BetaRealtimeWS({ model: "gpt-4o-transcribe", options: plain }, client);
    const { events, until } = record(rt as unknown as AnyRt);
    rt.on("error", (e) => events.push({ type: "sdk_error", e }));
    await opened(rt as unknown as AnyRt);
    rt.send({ type: "transcription_session.update", session: { input_audio_format: "g711_ulaw", input_audio_transcription: { model: "gpt-4o-transcribe", language: "en" }, turn_detection: null, include: ["item.input_audio_transcription.logprobs"] } } as never);
    await until((ev) => ev.some((e) => e.type === "transcription_session.updated"));
    // with a second of the line's silence before the commit: the streamed decode of narrowband
    // speech committed the instant it stops loses words (a finding for the engine, not the door)
    await appendPaced(rt as unknown as AnyRt, Buffer.concat([ulaw, Buffer.alloc(8000, 0xff)]), 8000, Infinity);
    rt.send({ type: "input_audio_buffer.commit" });
    await until(allDone);
    rt.close();
    for (const e of events) expect(openAiServerEvent.safeParse(e).success, JSON.stringify(e).slice(0, 300)).toBe(true);
    expect(events[0]).toMatchObject({ type: "transcription_session.created", session: { input_audio_format: "pcm16" } });
    expect(events.find((e) => e.type === "transcription_session.updated").session).toMatchObject({ input_audio_format: "g711_ulaw", turn_detection: null, include: ["item.input_audio_transcription.logprobs"] });
    expect(events.some((e) => e.type === "conversation.item.created")).toBe(true);
    expect(events.some((e) => e.type === "conversation.item.added")).toBe(false);
    const done = events.find((e) => e.type === `${T}.completed`);
    console.log(`beta µ-law: ${done.transcript}`);
    expect(new Set(words(done.transcript)).size).toBeGreaterThanOrEqual(3);
    expect(done.logprobs.length).toBeGreaterThan(3);
    for (const l of done.logprobs) expect(l.logprob).toBeLessThanOrEqual(0);
    expect(done.logprobs.map((l: any) => l.token).join("")).toBe(done.transcript);
  }, 120_000);
});

/**
 * Retries an upgrade refused 503 (with Retry-After) as a client would: the tests before
 * leave the streaming decoders busy for a moment, and on a loaded machine admission by
 * headroom then says "the engine cannot take another speaker" (engine_busy).
 */
async function admitted<T>(open: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await open();
    } catch (err) {
      if ((err as { status?: number }).status !== 503 || i >= 30) throw err;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

describe("the OpenAI Realtime door: hostile input", () => {
  const url = (query = "") => `${stack.baseUrl.replace(/^http/, "ws")}${OPENAI_REALTIME_PATH}${query}`;
  const bearer = () => ({ authorization: `Bearer ${key}` });

  it("answers bad events with OpenAI's error shape and stays open", async () => {
    const c = await admitted(() => connectRt(url("?intent=transcription"), bearer()));
    await c.next("session.created");
    const expectError = async (send: () => void, error: Record<string, unknown>) => {
      send();
      const e = await c.next("error");
      expect(e).toMatchObject({ event_id: expect.any(String), error: { type: "invalid_request_error", ...error } });
      expect(openAiServerEvent.safeParse(e).success).toBe(true);
    };
    await expectError(() => c.ws.send("{not json"), { code: "invalid_json", param: null, event_id: null });
    await expectError(() => c.sendJson({ type: "nope.nope", event_id: "e1" }), { code: "invalid_value", param: "type", event_id: "e1" });
    await expectError(() => c.sendJson({ type: "input_audio_buffer.append", event_id: "e2", audio: "not base64!" }), { code: "invalid_value", param: "audio", event_id: "e2" });
    await expectError(() => c.sendJson({ type: "input_audio_buffer.append", event_id: "e2b", audio: "AAAA AAA" }), { code: "invalid_value", param: "audio", event_id: "e2b" });
    await expectError(() => c.sendJson({ type: "input_audio_buffer.append", event_id: "e2c", audio: "AA=AAAAA" }), { code: "invalid_value", param: "audio", event_id: "e2c" });
    await expectError(() => c.sendJson({ type: "session.update", event_id: "e3", session: { type: "transcription", audio: { input: { format: { type: "audio/flac" } } } } }), { param: "session.audio.input.format.type", event_id: "e3" });
    await expectError(() => c.sendJson({ type: "session.update", event_id: "e4", session: { type: "realtime", audio: { input: { turn_detection: null } } } }), { code: "invalid_value", param: "session.type", event_id: "e4" });
    await expectError(() => c.sendJson({ type: "response.create", event_id: "e5" }), { param: "type", event_id: "e5" });
    await expectError(() => c.sendAudio(new Uint8Array(640)), { code: "invalid_event" });
    await expectError(() => c.sendJson({ type: "input_audio_buffer.commit", event_id: "e6" }), { code: "input_audio_buffer_commit_empty", event_id: "e6" });
    // the refused updates changed nothing; the connection still works
    c.sendJson({ type: "session.update", session: { type: "transcription" } });
    const updated = await c.next("session.updated");
    expect(updated.session.audio.input).toMatchObject({ format: { type: "audio/pcm", rate: 24000 }, turn_detection: { type: "server_vad" } });
    c.ws.close();
  });

  it("reads a large append (> 1 MiB) and closes 1009 above the text frame limit", async () => {
    const c = await admitted(() => connectRt(url(), bearer()));
    await c.next("session.created");
    c.sendJson({ type: "input_audio_buffer.append", audio: Buffer.alloc(3 * 1024 * 1024).toString("base64") }); // 4 MiB of base64, 65 s of silence
    c.sendJson({ type: "input_audio_buffer.clear" });
    await c.next("input_audio_buffer.cleared");
    c.sendJson({ type: "input_audio_buffer.append", audio: "A".repeat(16 * 1024 * 1024 + 512 * 1024) });
    expect(await c.closed).toEqual({ code: 1009, reason: "frame_too_large" });
  });

  it("selects exactly the realtime subprotocol; the beta one makes a beta session; semantic_vad maps to ours", async () => {
    const { ws, first } = await admitted(
      () =>
        new Promise<{ ws: WebSocket; first: any }>((resolve, reject) => {
          const ws = new WebSocket(url("?intent=transcription"), ["realtime", "openai-beta.realtime-v1"], { headers: bearer() });
          ws.once("message", (d) => resolve({ ws, first: JSON.parse(d.toString()) }));
          ws.once("unexpected-response", (_req, r) => reject(Object.assign(new Error(`upgrade refused ${r.statusCode}`), { status: r.statusCode })));
          ws.once("error", reject);
        }),
    );
    expect(ws.protocol).toBe("realtime");
    expect(first.type).toBe("transcription_session.created");
    const gone = new Promise((r) => ws.once("close", r));
    ws.close();
    await gone;
    const c = await admitted(() => connectRt(url(), bearer()));
    await c.next("session.created");
    c.sendJson({ type: "session.update", session: { type: "transcription", audio: { input: { turn_detection: { type: "semantic_vad", eagerness: "high" } } } } });
    expect((await c.next("session.updated")).session.audio.input.turn_detection).toEqual({ type: "semantic_vad", eagerness: "high" });
    c.ws.close();
    await c.closed;
  });

  it("an ek_ secret's session config is the session's start; a browser authenticates with the subprotocol alone", async () => {
    const res = await stack.fetch("/v1/realtime/client_secrets", {
      method: "POST",
      headers: { ...bearer(), "content-type": "application/json" },
      body: JSON.stringify({ session: { type: "transcription", audio: { input: { format: { type: "audio/pcmu" }, turn_detection: null, transcription: { model: "whisper-1", language: "en" } } }, include: ["item.input_audio_transcription.logprobs"] } }),
    });
    const body = await res.json();
    expect(res.status, JSON.stringify(body)).toBe(200);
    const secret = body.value as string;
    expect(secret).toMatch(/^ek_/);
    // a 503 with Retry-After (the streaming decoders still busy from the tests before, on a
    // loaded machine) is retried as a client would; the secret is reusable until it expires
    const open = () =>
      new Promise<{ ws: WebSocket; first: any } | { status: number; body: string }>((resolve, reject) => {
        const ws = new WebSocket(url("?intent=transcription"), ["realtime", `openai-insecure-api-key.${secret}`]);
        ws.once("message", (d) => resolve({ ws, first: JSON.parse(d.toString()) }));
        ws.once("error", reject);
        ws.once("unexpected-response", (_req, r) => r.on("data", (d: Buffer) => resolve({ status: r.statusCode ?? 0, body: d.toString() })));
      });
    let opened = await open();
    for (let i = 0; i < 20 && "status" in opened && opened.status === 503; i++) {
      await new Promise((r) => setTimeout(r, 1000));
      opened = await open();
    }
    if ("status" in opened) throw new Error(`ek_ upgrade refused ${opened.status}: ${opened.body}`);
    const { ws, first } = opened;
    expect(ws.protocol).toBe("realtime");
    expect(first).toMatchObject({ type: "session.created", session: { audio: { input: { format: { type: "audio/pcmu" }, turn_detection: null, transcription: { model: "whisper-1", language: "en" } } }, include: ["item.input_audio_transcription.logprobs"] } });
    // the preset is in effect: a manual commit of µ-law audio
    const events: any[] = [];
    ws.on("message", (d) => events.push(JSON.parse(d.toString())));
    for (let i = 0; i < ulaw.length; i += 8000) ws.send(JSON.stringify({ type: "input_audio_buffer.append", audio: ulaw.subarray(i, i + 8000).toString("base64") }));
    ws.send(JSON.stringify({ type: "input_audio_buffer.append", audio: Buffer.alloc(8000, 0xff).toString("base64") }));
    ws.send(JSON.stringify({ type: "input_audio_buffer.commit" }));
    const deadline = Date.now() + 60_000;
    while (!events.some((e) => e.type === `${T}.completed`) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const done = events.find((e) => e.type === `${T}.completed`);
    expect(done.logprobs.length).toBeGreaterThan(3);
    expect(events.some((e) => e.type === "session.updated")).toBe(false);
    ws.close();
  });

  it("appends count as audio for the idle timeout: 4408 only once they stop", async () => {
    const base = await gateways.start({ idleTimeoutSeconds: 1 });
    const c = await admitted(() => connectRt(`${base.replace(/^http/, "ws")}${OPENAI_REALTIME_PATH}`, bearer()));
    await c.next("session.created");
    const quiet = Buffer.alloc(4800).toString("base64"); // 100 ms of silence at 24 kHz
    const started = Date.now();
    while (Date.now() - started < 2500) {
      c.sendJson({ type: "input_audio_buffer.append", audio: quiet });
      await new Promise((r) => setTimeout(r, 250));
    }
    expect(c.ws.readyState).toBe(WebSocket.OPEN);
    const stoppedAt = Date.now();
    expect(await c.closed).toEqual({ code: 4408, reason: "idle_timeout" });
    expect(Date.now() - stoppedAt).toBeGreaterThanOrEqual(700);
  });

  it("empty appends are no audio: 4408 at the idle timeout while they still arrive", async () => {
    const base = await gateways.start({ idleTimeoutSeconds: 3 });
    const started = Date.now(); // the idle timer runs from the session's start, before session.created
    const c = await admitted(() => connectRt(`${base.replace(/^http/, "ws")}${OPENAI_REALTIME_PATH}`, bearer()));
    await c.next("session.created");
    let closedAt: number | null = null;
    let sent = 0;
    void c.closed.then(() => (closedAt = Date.now()));
    while (closedAt === null && Date.now() - started < 10_000) {
      c.sendJson({ type: "input_audio_buffer.append", audio: "" });
      sent++;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(closedAt, "still open after 10 s of empty appends").not.toBeNull();
    expect(await c.closed).toEqual({ code: 4408, reason: "idle_timeout" });
    expect(closedAt! - started).toBeGreaterThanOrEqual(2_900);
    expect(sent, "empty frames sent before the close").toBeGreaterThan(5);
  });

  it("is documented in /openapi.json (so /docs); plain HTTP gets 426", async () => {
    const doc = await (await stack.fetch("/openapi.json")).json();
    expect(doc.paths[OPENAI_REALTIME_PATH].get.summary).toContain("OpenAI Realtime");
    const res = await stack.fetch(OPENAI_REALTIME_PATH);
    expect(res.status).toBe(426);
    expect((await res.json()).error.code).toBe("websocket_required");
  });

  it("an ?intent other than transcription is answered with error and close 4000; no key is an HTTP 401 before the upgrade", async () => {
    const c = await admitted(() => connectRt(url("?intent=conversation"), bearer()));
    const e = await c.next("error");
    expect(e.error).toMatchObject({ code: "invalid_value", param: "intent" });
    expect((await c.closed).code).toBe(4000);
    const r = await refusal(url("?intent=transcription"));
    expect(r.status).toBe(401);
    expect(r.body.error).toMatchObject({ type: "authentication_error" });
  });
});
