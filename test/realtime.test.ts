import { execFileSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { sessionCreated } from "../schemas/realtime";
import { AUDIO_HEADERS } from "../schemas/realtime-internal";
import { BATCH_KIND, encodeAudioBatch } from "../schemas/audio-batch";
import { partitionOf } from "../services/realtime-gateway/session";
import { stableEventId } from "../services/realtime-gateway/session-feed";
import { setRealtimeGatewayEnabled } from "../services/realtime-gateway/gateway-flag";
import { startStack, type Stack } from "./support/stack";
import { connectRt, extraGateways, fixture, refusal, silence, streamPcm, wsUrl } from "./support/realtime-support";
import { fixturePath } from "./support/fixtures";

let stack: Stack;
let proKey: string;
const gateways = extraGateways(() => stack);

beforeAll(async () => {
  // PocketSphinx on a shared 2-core machine: give the router's per-attempt timeout room
  stack = await startStack({ POCKETSPHINX_REAL_TIME_FACTOR: "6" });
  proKey = (await stack.issueKey("pro")).key;
});
afterAll(async () => {
  await gateways.stopAll();
  await stack?.stop();
});

/** Waits until every committed item has its completed or failed event (the engine may be slow under load). */
async function allResults(c: { events: any[] }, timeoutMs = 90_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const items = c.events.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
    const done = c.events.filter((e) => e.type.endsWith(".completed") || e.type.endsWith(".failed")).map((e) => e.item_id);
    if (items.length > 0 && items.every((i) => done.includes(i))) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });


describe("realtime upgrade (spec 3.3, 5.3, 6.1, 7.2)", () => {
  it("sends session.created exactly per 6.1 on a Bearer sk- upgrade", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), bearer(proKey));
    const created = await c.next("session.created");
    expect(sessionCreated.parse(created)).toBeTruthy();
    expect(created).toMatchObject({
      type: "session.created",
      session_id: expect.stringMatching(/^sess_[0-9a-f]{24}$/),
      request_id: expect.any(String),
      audio: { format: "pcm_s16le", sample_rate: 16000, channels: 1 },
      turn_detection: { type: "server_vad" },
      plan: "pro",
      limits: { max_concurrent_utterances: 4, max_session_seconds: 14400, idle_timeout_seconds: 300, remaining_audio_seconds: 86400 },
    });
    c.ws.close(1000);
    expect((await c.closed).code).toBe(1000);
  });

  it("accepts an rt_ session token as ?access_token= and ?token=, and a declared sample rate", async () => {
    for (const param of ["access_token", "token"]) {
      const res = await stack.fetch("/v1/audio/transcriptions/session-token", { method: "POST", headers: bearer(proKey) });
      expect(res.status).toBe(200);
      const { token, endpoint } = await res.json();
      expect(endpoint).toBe("/v1/audio/transcriptions/stream");
      const c = await connectRt(wsUrl(stack.baseUrl, `${param}=${encodeURIComponent(token)}&sample_rate=48000`));
      const created = await c.next("session.created");
      expect(created.audio.sample_rate).toBe(48000);
      expect(created.plan).toBe("pro");
      c.ws.close();
      await c.closed;
    }
  });

  it("refuses bad credentials with 401 and the auth codes; a key in the URL is refused", async () => {
    const url = wsUrl(stack.baseUrl);
    const cases: [string, Record<string, string>, string][] = [
      [url, {}, "missing_api_key"],
      [url, bearer("sk-not-a-real-key-at-all"), "invalid_api_key"],
      [url, bearer("nope"), "invalid_api_key"],
      [wsUrl(stack.baseUrl, `access_token=${proKey}`), {}, "invalid_api_key"],
      [wsUrl(stack.baseUrl, `token=${proKey}`), {}, "invalid_api_key"],
      [wsUrl(stack.baseUrl, "access_token=rt_forged.token"), {}, "invalid_session_token"],
      [wsUrl(stack.baseUrl, "access_token=garbage"), {}, "invalid_session_token"],
    ];
    for (const [u, h, code] of cases) {
      const r = await refusal(u, h);
      expect(r.status, code).toBe(401);
      expect(r.body).toEqual({ error: { message: expect.any(String), type: "authentication_error", code } });
    }
  });

  it("answers plain HTTP on the stream path with 426 websocket_required, and serves the HTTP app on the same port", async () => {
    const res = await stack.fetch("/v1/audio/transcriptions/stream");
    expect(res.status).toBe(426);
    expect(await res.json()).toEqual({ error: { message: expect.any(String), type: "invalid_request_error", code: "websocket_required" } });
    const plans = await stack.fetch("/v1/external-transcription/plans");
    expect(plans.status).toBe(200);
    expect((await plans.json()).ok).toBe(true);
    const demo = await stack.fetch("/demo");
    expect(demo.status).toBe(200);
    expect(await demo.text()).toContain("/v1/audio/transcriptions/stream");
  });

  it("refuses bad audio parameters with 400", async () => {
    const r = await refusal(wsUrl(stack.baseUrl, "sample_rate=44100"), bearer(proKey));
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe("invalid_sample_rate");
  });

  it("refuses with 503 gateway_disabled while the operator switch is off", async () => {
    await setRealtimeGatewayEnabled(stack.nats, false);
    try {
      let r = await refusal(wsUrl(stack.baseUrl), bearer(proKey)).catch(() => null);
      for (let i = 0; i < 20 && r?.status !== 503; i++) {
        await new Promise((res) => setTimeout(res, 50));
        r = await refusal(wsUrl(stack.baseUrl), bearer(proKey)).catch(() => null);
      }
      expect(r!.status).toBe(503);
      expect(r!.body.error.code).toBe("gateway_disabled");
    } finally {
      await setRealtimeGatewayEnabled(stack.nats, true);
    }
    await new Promise((res) => setTimeout(res, 100));
    const c = await connectRt(wsUrl(stack.baseUrl), bearer(proKey));
    await c.next("session.created");
    c.ws.close();
    await c.closed;
  });

  it("holds the free plan's one concurrent connection (429) and frees it on close", async () => {
    const key = (await stack.issueKey("free")).key;
    const a = await connectRt(wsUrl(stack.baseUrl), bearer(key));
    await a.next("session.created");
    const r = await refusal(wsUrl(stack.baseUrl), bearer(key));
    expect(r.status).toBe(429);
    expect(r.body.error.code).toBe("too_many_connections");
    a.ws.close();
    await a.closed;
    await new Promise((res) => setTimeout(res, 200));
    const b = await connectRt(wsUrl(stack.baseUrl), bearer(key));
    await b.next("session.created");
    b.ws.close();
    await b.closed;
  });

  it("refuses the free plan's 7th handshake in a minute with 429", async () => {
    const key = (await stack.issueKey("free")).key;
    const minuteLeft = 60_000 - (Date.now() % 60_000);
    if (minuteLeft < 8000) await new Promise((r) => setTimeout(r, minuteLeft + 100));
    for (let i = 0; i < 6; i++) {
      const c = await connectRt(wsUrl(stack.baseUrl), bearer(key));
      await c.next("session.created");
      c.ws.close();
      await c.closed;
      await new Promise((res) => setTimeout(res, 100));
    }
    const r = await refusal(wsUrl(stack.baseUrl), bearer(key));
    expect(r.status).toBe(429);
    expect(r.body.error.code).toBe("rate_limit_exceeded");
    expect(Number(r.headers["retry-after"])).toBeGreaterThan(0);
  });
});

describe("realtime session (spec 4.6, 6, 7.3)", () => {
  it("answers malformed and unknown client messages with error events without dropping the socket", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), bearer(proKey));
    await c.next("session.created");
    c.ws.send("not json");
    expect((await c.next("error")).error.code).toBe("invalid_json");
    c.sendJson({ type: "response.create", event_id: "e1" });
    const unknown = await c.next("error");
    expect(unknown.error).toMatchObject({ code: "unknown_event_type", event_id: "e1" });
    c.sendJson({ type: "session.update", session: { turn_detection: { silence_duration_ms: "long" } } });
    expect((await c.next("error")).error.code).toBe("invalid_event");
    c.sendJson({ type: "session.update", session: { turn_detection: { silence_duration_ms: 700 }, input_audio_transcription: { language: "en" } } });
    const updated = await c.next("session.updated");
    expect(updated.session.turn_detection.silence_duration_ms).toBe(700);
    expect(updated.session.input_audio_transcription.language).toBe("en");
    c.sendJson({ type: "input_audio_buffer.commit", event_id: "c1" });
    expect((await c.next("error")).error).toMatchObject({ code: "input_audio_buffer_commit_empty", event_id: "c1" });
    expect(c.ws.readyState).toBe(c.ws.OPEN);
    c.sendJson({ type: "session.close" });
    expect(await c.closed).toEqual({ code: 1000, reason: "" });
  });

  it("streams jfk.wav faster than real time in frames of odd sample counts: speech events in order, one result per committed item", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), bearer(proKey));
    await c.next("session.created");
    const pcm = fixture("jfk.wav");
    await streamPcm(c, pcm, { speed: 4, chunkBytes: 3334 });
    await streamPcm(c, silence(1), { speed: 4, chunkBytes: 1002 });
    await allResults(c);
    c.sendJson({ type: "session.close" });
    const closed = await c.closed;
    expect(closed.code).toBe(1000);
    const kinds = c.events.map((e) => e.type);
    const speech = c.events.filter((e) => e.type.startsWith("input_audio_buffer.speech") || e.type === "input_audio_buffer.committed");
    expect(speech.length).toBeGreaterThanOrEqual(3);
    // started, stopped, committed per item, same item id, increasing times
    let lastEnd = -1;
    for (let i = 0; i < speech.length; i += 3) {
      const [s, t, m] = speech.slice(i, i + 3);
      expect([s.type, t.type, m.type]).toEqual(["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped", "input_audio_buffer.committed"]);
      expect(t.item_id).toBe(s.item_id);
      expect(m.item_id).toBe(s.item_id);
      expect(s.audio_start_ms).toBeGreaterThanOrEqual(lastEnd);
      expect(t.audio_end_ms).toBeGreaterThan(s.audio_start_ms);
      expect(t.audio_end_ms).toBeLessThanOrEqual(11_500);
      lastEnd = t.audio_end_ms;
    }
    const committed = c.events.filter((e) => e.type === "input_audio_buffer.committed");
    for (const m of committed) {
      const results = c.events.filter((e) => (e.type.endsWith(".completed") || e.type.endsWith(".failed")) && e.item_id === m.item_id);
      expect(results.length, `result for ${m.item_id}: ${kinds.join(",")}`).toBe(1);
    }
    // real transcripts from the embedded engine: sensible text, timings inside each utterance
    const completed = c.events.filter((e) => e.type === "conversation.item.input_audio_transcription.completed");
    expect(completed.length, JSON.stringify(c.events.filter((e) => e.type.endsWith(".failed")))).toBe(committed.length);
    const text = completed.map((e) => e.transcript).join(" ").toLowerCase();
    const expected = ["so", "my", "fellow", "americans", "ask", "not", "what", "your", "country", "can", "do", "for", "you"];
    expect(expected.filter((w) => text.split(/\W+/).includes(w)).length, text).toBeGreaterThanOrEqual(5);
    for (const e of completed) {
      const m = committed.find((x) => x.item_id === e.item_id);
      expect(e.audio_start_ms).toBe(m.audio_start_ms);
      expect(e.audio_end_ms).toBe(m.audio_end_ms);
      // streamed items send stable words as they come (append-only): the deltas concatenate to the transcript
      const deltas = c.events.filter((x) => x.type.endsWith(".delta") && x.item_id === e.item_id);
      expect(deltas.map((d) => d.delta).join("")).toBe(e.transcript);
      for (const d of deltas) expect(c.events.indexOf(d)).toBeLessThan(c.events.indexOf(e));
      for (const w of e.words) {
        expect(w.start_ms).toBeGreaterThanOrEqual(e.audio_start_ms - 50);
        expect(w.end_ms).toBeLessThanOrEqual(e.audio_end_ms + 50);
        expect(w.end_ms).toBeGreaterThanOrEqual(w.start_ms);
      }
    }
  });

  it("a binary frame that is not whole samples is dropped with an error event and does not shift the audio after it", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), bearer(proKey));
    await c.next("session.created");
    const pcm = fixture("jfk.wav");
    const half = 16000 * 5;
    await streamPcm(c, pcm.subarray(0, half), { speed: 4, chunkBytes: 3200 });
    // 1 001 stray bytes in the middle of the speech: kept, they would turn the rest into noise
    c.sendAudio(new Uint8Array(1001).fill(0x7f));
    const error = await c.next("error");
    expect(error).toMatchObject({ type: "error", event_id: expect.stringMatching(/^evt_/), error: { type: "invalid_request_error", code: "invalid_audio_frame", event_id: null } });
    expect(error.error.message).toMatch(/1001 bytes.*multiple of 2 bytes/);
    expect(c.ws.readyState).toBe(c.ws.OPEN);
    await streamPcm(c, pcm.subarray(half), { speed: 4, chunkBytes: 3200 });
    await streamPcm(c, silence(1.5), { speed: 4, chunkBytes: 3200 });
    await allResults(c);
    c.sendJson({ type: "session.close" });
    expect((await c.closed).code).toBe(1000);
    expect(c.events.filter((e) => e.type === "error")).toHaveLength(1);
    // the audio after the stray frame is still speech: its words are transcribed
    const later = c.events.filter((e) => e.type === "conversation.item.input_audio_transcription.completed" && e.audio_end_ms > 6000);
    const text = later.map((e) => e.transcript).join(" ").toLowerCase();
    const expected = ["ask", "not", "what", "your", "country", "can", "do", "for", "you"];
    expect(expected.filter((w) => text.split(/\W+/).includes(w)).length, text).toBeGreaterThanOrEqual(3);

    // stereo: 2 bytes is a whole sample but half a sample frame
    const stereo = await connectRt(wsUrl(stack.baseUrl, "channels=2"), bearer(proKey));
    await stereo.next("session.created");
    stereo.sendAudio(new Uint8Array(4 * 800 + 2));
    expect((await stereo.next("error")).error).toMatchObject({ code: "invalid_audio_frame", message: expect.stringMatching(/3202 bytes.*multiple of 4 bytes/) });
    stereo.sendJson({ type: "session.close" });
    expect((await stereo.closed).code).toBe(1000);
  });

  it("streams ldc93s1.wav in real time as 48 kHz stereo: resampled, segmented and transcribed", async () => {
    const raw = execFileSync("ffmpeg", ["-v", "error", "-i", fixturePath("ldc93s1.wav"), "-ar", "48000", "-ac", "2", "-f", "s16le", "-"]);
    const pcm = new Int16Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
    const c = await connectRt(wsUrl(stack.baseUrl, "sample_rate=48000&channels=2"), bearer(proKey));
    const created = await c.next("session.created");
    expect(created.audio).toEqual({ format: "pcm_s16le", sample_rate: 48000, channels: 2 });
    const t0 = Date.now();
    // 48 kHz stereo is 192 kB/s: pace at 6x the 16 kHz mono byte rate to stay real time
    await streamPcm(c, pcm, { speed: 6, chunkBytes: 19204 });
    expect(Date.now() - t0).toBeGreaterThan(2500);
    await streamPcm(c, silence(1), { speed: 1, chunkBytes: 3200 });
    await allResults(c);
    c.sendJson({ type: "session.close" });
    expect((await c.closed).code).toBe(1000);
    const completed = c.events.filter((e) => e.type === "conversation.item.input_audio_transcription.completed");
    for (const e of completed) expect(e.audio_end_ms).toBeLessThanOrEqual(4200);
    const transcript = completed.map((e) => e.transcript).join(" ");
    const words = transcript.toLowerCase().split(/\W+/);
    // PocketSphinx gets about "she had to adapt to increase the watch(ful| for all year)" from this clip
    const expected = ["she", "had", "your", "dark", "suit", "in", "greasy", "wash", "water", "all", "year"];
    expect(expected.filter((w) => words.includes(w)).length, transcript).toBeGreaterThanOrEqual(2);
    expect(transcript.toLowerCase()).toContain("she had");
  });

  it("session.close commits the open utterance and delivers its transcript before closing 1000", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), bearer(proKey));
    await c.next("session.created");
    // speech still going when the client closes: no trailing silence
    await streamPcm(c, fixture("jfk.wav").subarray(0, 16000 * 2), { speed: Infinity, chunkBytes: 4098 });
    c.sendJson({ type: "session.close" });
    expect((await c.closed).code).toBe(1000);
    const committed = c.events.filter((e) => e.type === "input_audio_buffer.committed");
    expect(committed.at(-1).reason).toBe("close");
    for (const m of committed) {
      expect(c.events.some((e) => (e.type.endsWith(".completed") || e.type.endsWith(".failed")) && e.item_id === m.item_id)).toBe(true);
    }
  });

  it("a control the VAD handles twice (a redelivered batch) is answered once: cleared and commit errors have deterministic msg ids", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), bearer(proKey));
    const { session_id: sessionId } = await c.next("session.created");
    await streamPcm(c, silence(0.2), { speed: Infinity });
    // the same two controls, at one place in the session, delivered to the VAD twice
    const control = (kind: string, seq: number) => ({ sessionId, kind: "control" as const, seq, offset: 3200, payload: new TextEncoder().encode(JSON.stringify({ kind, event_id: null })) });
    const batch = encodeAudioBatch([control("clear", 900_001), control("commit", 900_002)]);
    const h = natsHeaders();
    h.set(AUDIO_HEADERS.kind, BATCH_KIND);
    const subject = stack.nats.topology.subjects.rtAudio(partitionOf(sessionId, stack.config.realtime.vadPartitions), "test-redelivery");
    for (let i = 0; i < 2; i++) await stack.nats.js.publish(subject, batch, { headers: h, msgID: `redelivery-${sessionId}-${i}` });
    await c.next("input_audio_buffer.cleared");
    expect((await c.next("error")).error.code).toBe("input_audio_buffer_commit_empty");
    // a later answer on the session: the duplicates had their chance to arrive
    c.sendJson({ type: "input_audio_buffer.clear" });
    await c.next("input_audio_buffer.cleared");
    expect(c.events.filter((e) => e.type === "input_audio_buffer.cleared")).toHaveLength(2);
    expect(c.events.filter((e) => e.type === "error")).toHaveLength(1);
    c.sendJson({ type: "session.close" });
    expect((await c.closed).code).toBe(1000);
  });

  it("delivers an event appended twice under one event id (a writer's retry) to the client once", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), bearer(proKey));
    const { session_id: sessionId } = await c.next("session.created");
    const event = { type: "input_audio_buffer.cleared" as const, event_id: "evt_retried" };
    for (let i = 0; i < 2; i++) {
      // the store names both the same (an answer to one control): JetStream keeps one, a core subscriber sees both
      await stack.runtime.ctx.sessions.appendDecided(sessionId, [{ event: { type: "rt.server_event", data: event }, key: { kind: "control", seq: 1_000_000 } }]);
    }
    // the client sees the stored event's stable id (session-feed.ts), the same live and replayed
    const stable = stableEventId(`${sessionId}:input_audio_buffer.cleared:control-1000000`);
    expect((await c.next("input_audio_buffer.cleared")).event_id).toBe(stable);
    c.sendJson({ type: "input_audio_buffer.clear" }); // a later event: the duplicate had its chance to arrive
    expect((await c.next("input_audio_buffer.cleared")).event_id).not.toBe(stable);
    expect(c.events.filter((e) => e.event_id === stable)).toHaveLength(1);
    c.sendJson({ type: "session.close" });
    expect((await c.closed).code).toBe(1000);
  });
});
