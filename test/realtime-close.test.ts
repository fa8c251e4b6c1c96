import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./support/stack";
import { connectRt, extraGateways, refusal, silence, streamPcm, wsUrl, type RtClient } from "./support/realtime-support";
import { rtAdmissionsRefused, rtSessionCloses, rtSessionsShed } from "../shared/metrics";
import { publishVadLoad } from "../shared/realtime-backlog";

/**
 * Every close of spec 7.3 that a client can cause, each triggered for real and asserted
 * with its code and reason. Limits are tightened by running extra gateways on the
 * stack's NATS and Postgres with smaller plan limits or backpressure bounds.
 */
let stack: Stack;
let key: string;
const gateways = extraGateways(() => stack);
const gatewayWith = gateways.start;

beforeAll(async () => {
  stack = await startStack();
  key = (await stack.issueKey("pro")).key;
});
afterAll(async () => {
  await gateways.stopAll();
  await stack?.stop();
});

const auth = () => ({ authorization: `Bearer ${key}` });

/**
 * The session took everything sent before and is open: a client event sent now is
 * answered (an unknown type earns an error event), and the gateway handles a socket's
 * frames in order. Waits for that answer instead of sleeping.
 */
async function expectOpenAfterWhatWasSent(c: RtClient) {
  const id = `probe_${Math.random().toString(36).slice(2)}`;
  c.sendJson({ type: "probe.nope", event_id: id });
  const answer = await Promise.race([c.next("error", 60_000), c.closed.then((closed) => ({ closed }))]);
  expect(answer, JSON.stringify(answer)).toMatchObject({ type: "error", error: { code: "unknown_event_type", event_id: id } });
  expect(c.ws.readyState).toBe(c.ws.OPEN);
}

/** Sessions this process's gateways closed with `code` so far. */
async function closesWith(code: number): Promise<number> {
  return (await rtSessionCloses.get()).values.find((v) => v.labels.code === String(code))?.value ?? 0;
}

/** A labelled counter's value in this process's registry (0 before its first count). */
async function metricValue(counter: typeof rtSessionsShed, labels: Record<string, string>): Promise<number> {
  return (await counter.get()).values.find((v) => Object.entries(labels).every(([k, x]) => (v.labels as Record<string, unknown>)[k] === x))?.value ?? 0;
}


describe("close codes (spec 7.3)", () => {
  it("1000 on a graceful session.close", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), auth());
    await c.next("session.created");
    await streamPcm(c, silence(0.5), { speed: Infinity });
    c.sendJson({ type: "session.close" });
    expect(await c.closed).toEqual({ code: 1000, reason: "" });
  });

  it("1009 frame_too_large for a binary frame over 1 MiB (exactly 1 MiB is accepted)", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), auth());
    await c.next("session.created");
    c.sendAudio(new Uint8Array(1024 * 1024));
    await expectOpenAfterWhatWasSent(c);
    c.sendAudio(new Uint8Array(1024 * 1024 + 1));
    expect(await c.closed).toEqual({ code: 1009, reason: "frame_too_large" });
  });

  it("1009 frame_too_large also for a text frame over 1 MiB and for frames far over it (8 MiB)", async () => {
    const text = await connectRt(wsUrl(stack.baseUrl), auth());
    await text.next("session.created");
    text.sendJson({ type: "session.update", session: { input_audio_transcription: { prompt: "x".repeat(1024 * 1024) } } });
    expect(await text.closed).toEqual({ code: 1009, reason: "frame_too_large" });
    const huge = await connectRt(wsUrl(stack.baseUrl), auth());
    await huge.next("session.created");
    huge.sendAudio(new Uint8Array(8 * 1024 * 1024));
    expect(await huge.closed).toEqual({ code: 1009, reason: "frame_too_large" });
  });

  it("4408 idle_timeout when no audio arrives within the plan's idle timeout", async () => {
    const base = await gatewayWith({ idleTimeoutSeconds: 1 });
    const c = await connectRt(wsUrl(base), auth());
    const created = await c.next("session.created");
    expect(created.limits.idle_timeout_seconds).toBe(1);
    const t0 = Date.now();
    c.sendJson({ type: "input_audio_buffer.clear" }); // text is not audio: does not reset the timer
    expect(await c.closed).toEqual({ code: 4408, reason: "idle_timeout" });
    // not before the timeout (a lower bound holds on any machine); the upper bound only
    // tells the 1 s timer from none (a loaded machine delays the sweep, not by 20 s)
    expect(Date.now() - t0).toBeGreaterThanOrEqual(900);
    expect(Date.now() - t0).toBeLessThan(20_000);
  });

  it("4408 idle_timeout at the plan's idle timeout for a session that sends only zero-length frames", async () => {
    const base = await gatewayWith({ idleTimeoutSeconds: 3 });
    const t0 = Date.now(); // the idle timer runs from the session's start, before session.created
    const c = await connectRt(wsUrl(base), auth());
    await c.next("session.created");
    let closedAt: number | null = null;
    let sent = 0;
    void c.closed.then(() => (closedAt = Date.now()));
    // an empty frame every 100 ms for 10 s: the session must close while they still arrive
    while (closedAt === null && Date.now() - t0 < 10_000) {
      c.sendAudio(new Uint8Array(0));
      sent++;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(closedAt, "still open after 10 s of empty frames").not.toBeNull();
    expect(await c.closed).toEqual({ code: 4408, reason: "idle_timeout" });
    expect(closedAt! - t0).toBeGreaterThanOrEqual(2_900);
    expect(sent, "empty frames sent before the close").toBeGreaterThan(5);
  });

  it("1008 session_duration_limit when the session outlives maxSessionSeconds", async () => {
    const base = await gatewayWith({ maxSessionSeconds: 1 });
    const c = await connectRt(wsUrl(base), auth());
    expect((await c.next("session.created")).limits.max_session_seconds).toBe(1);
    void streamPcm(c, silence(5), { speed: 1, chunkBytes: 3200 });
    expect(await c.closed).toEqual({ code: 1008, reason: "session_duration_limit" });
  });

  it("1008 session_audio_limit when the session's audio exceeds maxAudioSecondsPerSession", async () => {
    const base = await gatewayWith({ maxAudioSecondsPerSession: 1 });
    const c = await connectRt(wsUrl(base), auth());
    await c.next("session.created");
    await streamPcm(c, silence(0.9), { speed: Infinity });
    await expectOpenAfterWhatWasSent(c);
    await streamPcm(c, silence(0.3), { speed: Infinity });
    expect(await c.closed).toEqual({ code: 1008, reason: "session_audio_limit" });
  });

  it("1008 audio_quota_exhausted when the billing window runs out; realtime audio is recorded as usage", async () => {
    const own = (await stack.issueKey("pro")).key;
    const base = await gatewayWith({ maxAudioSecondsPerWindow: 4 });
    const first = await connectRt(wsUrl(base), { authorization: `Bearer ${own}` });
    expect((await first.next("session.created")).limits.remaining_audio_seconds).toBe(4);
    await streamPcm(first, silence(2.5), { speed: Infinity });
    first.sendJson({ type: "session.close" });
    expect((await first.closed).code).toBe(1000);

    // the live budget (domain/usage/budget.ts) has the 2.5 s drawn and the rest of the
    // first slice given back at close: the next session sees 1 s left (1.5 s, floored)
    let remaining = -1;
    for (let i = 0; i < 50 && remaining !== 1; i++) {
      const probe = await connectRt(wsUrl(base), { authorization: `Bearer ${own}` });
      remaining = (await probe.next("session.created")).limits.remaining_audio_seconds;
      probe.ws.close();
      await probe.closed;
      if (remaining !== 1) await new Promise((r) => setTimeout(r, 100));
    }
    expect(remaining).toBe(1);

    const second = await connectRt(wsUrl(base), { authorization: `Bearer ${own}` });
    await second.next("session.created");
    await streamPcm(second, silence(2), { speed: Infinity });
    expect(await second.closed).toEqual({ code: 1008, reason: "audio_quota_exhausted" });
  });

  it("1013 upstream_backpressure: while the plane is far behind, the gateway gives back its newest session only, and refuses new ones 503 with Retry-After until it catches up", async () => {
    const admission = { ...stack.config.realtime.admission, maxVadLagMs: 150, shedLagMs: 1000, shedEveryMs: 60_000 };
    const base = await gatewayWith({}, { admission });
    const older = await connectRt(wsUrl(base), auth());
    await older.next("session.created");
    const newest = await connectRt(wsUrl(base), auth());
    await newest.next("session.created");
    const shedBefore = await metricValue(rtSessionsShed, { reason: "vad_behind" });

    // A VAD replica reports reading the audio 1.5 s late (core NATS, as vad-consumer.ts
    // does every 500 ms): over this gateway's shed bound, and every gateway's admission bound.
    const report = () => publishVadLoad(stack.nats, { replica: "vad_test_far_behind", lag_ms: 1500, loop_delay_ms: 3, at: Date.now() });
    report();
    const reporting = setInterval(report, 200);
    try {
      expect(await newest.closed).toEqual({ code: 1013, reason: "upstream_backpressure" });
      // one at a time (one per RT_SHED_EVERY_MS): the session admitted earlier carries on
      await expectOpenAfterWhatWasSent(older);
      expect(await metricValue(rtSessionsShed, { reason: "vad_behind" })).toBe(shedBefore + 1);

      const refused = await refusal(wsUrl(base), auth());
      expect(refused.status).toBe(503);
      expect(refused.body.error.code).toBe("upstream_unavailable");
      expect(refused.body.error.message).toMatch(/capacity/);
      // the measured cause, named
      expect(refused.body.error.message).toMatch(/Measured: voice activity detection reads the audio 1500 ms late > 150 ms\./);
      expect(Number(refused.headers["retry-after"])).toBe(5);
    } finally {
      clearInterval(reporting);
    }
    // the report goes stale (two report intervals, 1 s): admitted again
    for (const deadline = Date.now() + 30_000; ; ) {
      const c = await connectRt(wsUrl(base), auth()).catch(() => undefined);
      if (c) {
        await c.next("session.created");
        c.ws.close(1000);
        break;
      }
      if (Date.now() > deadline) throw new Error("never admitted again after the VAD's report went stale");
      await new Promise((r) => setTimeout(r, 250));
    }
    await expectOpenAfterWhatWasSent(older);
    older.ws.close(1000);
  });

  it("503 upstream_unavailable with Retry-After, and no session.created, for an upgrade past the admission burst", async () => {
    const admission = { ...stack.config.realtime.admission, burst: 1, plannedSessions: 0, settleMs: 30_000 };
    const base = await gatewayWith({}, { admission });
    const first = await connectRt(wsUrl(base), auth());
    await first.next("session.created");
    const refusedBefore = await metricValue(rtAdmissionsRefused, { reason: "admission_burst" });
    const refused = await refusal(wsUrl(base), auth());
    expect(refused.status).toBe(503);
    expect(refused.headers["content-type"]).toMatch(/application\/json/);
    expect(refused.body.error).toMatchObject({ code: "upstream_unavailable", type: expect.any(String) });
    expect(Number(refused.headers["retry-after"])).toBe(30);
    expect(await metricValue(rtAdmissionsRefused, { reason: "admission_burst" })).toBe(refusedBefore + 1);
    await expectOpenAfterWhatWasSent(first);
    first.ws.close(1000);
  });

  it("a herd arriving at once is admitted whole up to the predicted sessions, past the burst; the next is refused 503 with Retry-After", async () => {
    // load bounds out of reach (the machine's cores too): a busy test machine near them would admit a fifth of the burst instead
    const admission = { ...stack.config.realtime.admission, burst: 1, plannedSessions: 4, settleMs: 30_000, maxLoopDelayMs: 60_000, maxVadLagMs: 60_000, maxDecisionMs: 60_000, maxMachineShare: 1 };
    const base = await gatewayWith({}, { admission });
    // six upgrades at once: none is open when the others are judged, so the four in flight count
    const tries = await Promise.allSettled(Array.from({ length: 6 }, () => connectRt(wsUrl(base), auth())));
    const admitted = tries.flatMap((t) => (t.status === "fulfilled" ? [t.value] : []));
    const refused = tries.flatMap((t) => (t.status === "rejected" ? [t.reason as { status?: number; headers?: Record<string, string> }] : []));
    expect(admitted).toHaveLength(4);
    expect(refused.map((r) => r.status)).toEqual([503, 503]);
    for (const r of refused) expect(Number(r.headers?.["retry-after"])).toBeGreaterThanOrEqual(30);
    for (const c of admitted) await c.next("session.created");
    for (const c of admitted) c.ws.close(1000);
  });

  it("1013 client_backpressure when the client stops reading its events", async () => {
    const base = await gatewayWith({}, { maxClientBufferBytes: 64 * 1024 });
    const c = await connectRt(wsUrl(base), auth());
    await c.next("session.created");
    const socket = (c.ws as unknown as { _socket: { pause(): void; resume(): void } })._socket;
    socket.pause();
    // each bad message earns an error event echoing its 128-character event_id
    const id = "x".repeat(128);
    const before = await closesWith(1013);
    for (let i = 0; i < 40_000; i++) c.sendJson({ type: "nope", event_id: id });
    // the gateway closes it while the client is still not reading (counted as it does)
    for (const deadline = Date.now() + 60_000; (await closesWith(1013)) === before; ) {
      if (Date.now() > deadline) throw new Error("the gateway never closed the session that stopped reading");
      await new Promise((r) => setTimeout(r, 50));
    }
    socket.resume();
    expect(await c.closed).toEqual({ code: 1013, reason: "client_backpressure" });
  });

  // Last in the file: it changes the stack's audio stream and puts it back.
  it("1011 client_error when the audio stream refuses the session's audio (an operator shrank its limits)", async () => {
    const name = stack.nats.topology.streams.rtAudio.name;
    const before = (await stack.nats.jsm.streams.info(name)).config;
    const c = await connectRt(wsUrl(stack.baseUrl), auth());
    await c.next("session.created");
    await streamPcm(c, silence(0.3), { speed: Infinity });
    await expectOpenAfterWhatWasSent(c);
    try {
      // 100 ms of audio is one 3 200-byte message; the stream now takes at most 1 KiB
      await stack.nats.jsm.streams.update(name, { ...before, max_msg_size: 1024 });
      await streamPcm(c, silence(0.3), { speed: Infinity });
      expect(await c.closed).toEqual({ code: 1011, reason: "client_error" });
    } finally {
      await stack.nats.jsm.streams.update(name, before);
    }
    // the same key connects again at once: the lease of the failed session was released
    const again = await connectRt(wsUrl(stack.baseUrl), auth());
    await again.next("session.created");
    again.sendJson({ type: "session.close" });
    expect((await again.closed).code).toBe(1000);
  });
});
