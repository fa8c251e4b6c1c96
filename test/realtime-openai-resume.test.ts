import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { OPENAI_REALTIME_PATH, openAiServerEvent } from "../schemas/openai-realtime";
import { issueResumeCredential } from "../domain/sessions/resume";
import { createResampler } from "../shared/audio/resample";
import { connectRt, fixture, RELAXED_ADMISSION, refusal, wsUrl, type RtClient } from "./support/realtime-support";
import { cut, speech, storedBeyond, storedItems } from "./support/resume";
import { startServiceProcess, type ServiceProcess } from "./support/service-process";
import { startStack, type Stack } from "./support/stack";

/**
 * Resuming a session through the OpenAI Realtime door (`WS /v1/realtime`, issue 30;
 * docs/realtime-resume.md, "Through the OpenAI door") on the real stack,
 * with a raw WebSocket client speaking OpenAI's events: the TCP connection cut
 * mid-utterance and between utterances, the door's config restored, a gateway stopped
 * (SIGTERM) or killed (SIGKILL), and the resumes that must be refused.
 */
let stack: Stack;
let key: string;
const children: ServiceProcess[] = [];
const T = "conversation.item.input_audio_transcription";

beforeAll(async () => {
  // the commit path (one transcript per item, the same every run), as test/realtime-resume.test.ts
  stack = await startStack({ POCKETSPHINX_REAL_TIME_FACTOR: "6", RT_MAX_TRANSCRIPT_WAIT_MS: "60000", RT_STREAM_DECODERS: "0", ...RELAXED_ADMISSION });
  key = (await stack.issueKey("pro", "tenant-door-resume")).key;
});
afterAll(async () => {
  for (const c of children) await c.kill().catch(() => undefined);
  await stack?.stop();
});

const bearer = (k: string) => ({ authorization: `Bearer ${k}` });
const doorUrl = (base: string, query = "") => `${base.replace(/^http/, "ws")}${OPENAI_REALTIME_PATH}?intent=transcription${query ? `&${query}` : ""}`;
const resumeQuery = (credential: string, after: string | null) => `resume=${encodeURIComponent(credential)}${after ? `&last_event_id=${encodeURIComponent(after)}` : ""}`;
const isOutcome = (e: any) => e.type === `${T}.completed` || e.type === `${T}.failed`;
const lastEventId = (events: any[]) => [...events].reverse().find((e) => typeof e.event_id === "string")?.event_id ?? null;

/** speech() (jfk twice with pauses) as the door's default format: 24 kHz PCM16. */
function speech24(): Int16Array {
  return createResampler(16000, 24000, 1).push(speech());
}

/** Sends 24 kHz PCM16 as base64 appends of 40 ms, at `speed` × real time. */
async function appendPcm(c: RtClient, pcm: Int16Array, speed = 4) {
  const bytes = Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength);
  const chunk = 960 * 2;
  const start = Date.now();
  for (let at = 0; at < bytes.length; at += chunk) {
    if (c.ws.readyState !== WebSocket.OPEN) return;
    c.sendJson({ type: "input_audio_buffer.append", audio: bytes.subarray(at, at + chunk).toString("base64") });
    const due = start + ((at + chunk) / 48_000 / speed) * 1000;
    if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
  }
}

/** Waits until every committed item among `events` has its outcome. */
async function outcomes(events: () => any[], timeoutMs = 120_000) {
  for (const deadline = Date.now() + timeoutMs; Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) {
    const es = events();
    const items = es.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
    const done = new Set(es.filter(isOutcome).map((e) => e.item_id));
    if (items.length > 0 && items.every((i) => done.has(i))) return;
  }
  throw new Error("timed out waiting for the outcomes of the committed items");
}

/** The transcripts in commit order (each item's one outcome). */
const transcripts = (events: any[]) =>
  events.filter((e) => e.type === "input_audio_buffer.committed").map((c) => events.filter((e) => isOutcome(e) && e.item_id === c.item_id).map((e) => e.transcript ?? e.error?.code));

async function finish(c: RtClient) {
  c.sendJson({ type: "session.close" });
  expect((await c.closed).code).toBe(1000);
}

describe("resuming a session through the OpenAI door", () => {
  let baseline: string[][];

  it("an uninterrupted door run (the reference): session.created carries the resume offer", async () => {
    const c = await connectRt(doorUrl(stack.baseUrl), bearer(key));
    const created = await c.next("session.created");
    expect(created.resume).toMatchObject({ credential: expect.stringMatching(/^rs_/), grace_seconds: 30 });
    expect(created.event_id).toMatch(/^event_evt_0_0\.[0-9a-f]+$/);
    await appendPcm(c, speech24());
    await outcomes(() => c.events);
    await finish(c);
    baseline = transcripts(c.events);
    expect(baseline.length).toBeGreaterThanOrEqual(4);
    for (const e of c.events) expect(openAiServerEvent.safeParse(e).success, JSON.stringify(e).slice(0, 300)).toBe(true);
  }, 180_000);

  it("a connection cut mid-utterance and again between utterances resumes through the door: the transcripts equal the uninterrupted run's, no item twice, none missing, no event id repeated", async () => {
    const pcm = speech24();
    const connections: RtClient[] = [];
    let c = await connectRt(doorUrl(stack.baseUrl), bearer(key));
    connections.push(c);
    const created = await c.next("session.created");
    const sessionId: string = created.session.id;
    let credential: string = created.resume.credential;
    // mid-utterance: 2.0 s in; between utterances: in the 1.5 s pause after the first jfk (24 kHz samples)
    const cuts = [2.0 * 24000, Math.round((fixture("jfk.wav").length / 16000 + 1.2) * 24000)];
    let from = 0;
    const replayed: number[] = [];
    const all = () => connections.flatMap((x) => x.events);
    for (const at of cuts) {
      await appendPcm(c, pcm.subarray(from, at));
      cut(c);
      await c.closed;
      await new Promise((r) => setTimeout(r, 2000));
      if (at === cuts[1]) await storedBeyond(stack.nats, sessionId, all());
      c = await connectRt(doorUrl(stack.baseUrl, resumeQuery(credential, lastEventId(all()))), bearer(key));
      connections.push(c);
      const resumed = await c.next("session.resumed");
      expect(c.events[0]).toBe(resumed);
      expect(resumed.session_id).toBe(sessionId);
      expect(resumed.audio_ms * 24).toBeLessThanOrEqual(at);
      expect(resumed.audio_ms * 24).toBeGreaterThan(at - 24000);
      credential = resumed.resume.credential;
      from = resumed.audio_ms * 24;
      replayed.push(resumed.replayed);
    }
    await appendPcm(c, pcm.subarray(from));
    await outcomes(all);
    await finish(c);

    const events = all();
    // the first cut fell inside an utterance (its commit came after it), and what was decided while away came in the replays
    const firstItem = connections[0]!.events.find((e) => e.type === "input_audio_buffer.speech_started");
    expect(connections[0]!.events.some((e) => e.type === "input_audio_buffer.committed" && e.item_id === firstItem.item_id)).toBe(false);
    expect(replayed.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    for (const e of events) expect(openAiServerEvent.safeParse(e).success, JSON.stringify(e).slice(0, 300)).toBe(true);
    const ids = events.map((e) => e.event_id);
    expect(new Set(ids).size, "no event id twice").toBe(ids.length);
    const committed = events.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
    expect(new Set(committed).size, "no item committed twice").toBe(committed.length);
    for (const kind of ["conversation.item.added", "conversation.item.done"]) {
      expect(events.filter((e) => e.type === kind).map((e) => e.item.id)).toEqual(committed);
    }
    for (const item of committed) expect(events.filter((e) => isOutcome(e) && e.item_id === item)).toHaveLength(1);
    expect(transcripts(events)).toEqual(baseline);
    expect(transcripts(events).flat().join(" ")).toBe(baseline.flat().join(" "));
    // everything the session stored reached the client
    expect([...committed].sort()).toEqual((await storedItems(stack.nats, sessionId)).sort());
  }, 240_000);

  it("restores the door's config and protocol generation on resume (beta shapes, include logprobs), and resumes inside one native event's door events", async () => {
    const c = await connectRt(doorUrl(stack.baseUrl), { ...bearer(key), "openai-beta": "realtime=v1" });
    const created = await c.next("transcription_session.created");
    c.sendJson({ type: "transcription_session.update", session: { include: ["item.input_audio_transcription.logprobs"] } });
    await c.next("transcription_session.updated");
    const jfk = createResampler(16000, 24000, 1).push(fixture("jfk.wav"));
    await appendPcm(c, jfk);
    await appendPcm(c, new Int16Array(24000 * 1.5));
    await outcomes(() => c.events);
    cut(c);
    await c.closed;
    // resume as if the client had processed only the committed event of the last item (`_0`): its item.created (`_1`) comes again
    const lastCommit = c.events.filter((e) => e.type === "input_audio_buffer.committed").at(-1);
    expect(lastCommit.event_id).toMatch(/^event_evt_[0-9a-f]{24}_0$/);
    const second = await connectRt(doorUrl(stack.baseUrl, resumeQuery(created.resume.credential, lastCommit.event_id)), bearer(key));
    const resumed = await second.next("session.resumed");
    const created2 = await second.next("conversation.item.created");
    expect(created2.item.id).toBe(lastCommit.item_id);
    expect(created2.event_id).toBe(lastCommit.event_id.replace(/_0$/, "_1"));
    await outcomes(() => [lastCommit, ...second.events]);
    const completed = second.events.find((e) => e.type === `${T}.completed` && e.item_id === lastCommit.item_id);
    expect(completed.logprobs?.length).toBeGreaterThan(0);
    expect(second.events.some((e) => e.type === "input_audio_buffer.committed")).toBe(false);
    // audio after the resume: the restored config (beta, logprobs) is in effect
    await appendPcm(second, jfk.subarray(0, 24000 * 4));
    await appendPcm(second, new Int16Array(24000 * 1.5));
    const next = await second.next("conversation.item.created", 60_000);
    await outcomes(() => [{ type: "input_audio_buffer.committed", item_id: next.item.id }, ...second.events]);
    expect(second.events.find((e) => e.type === `${T}.completed` && e.item_id === next.item.id).logprobs?.length).toBeGreaterThan(0);
    expect(second.events.some((e) => e.type === "conversation.item.added")).toBe(false);
    expect(resumed.resume.credential).toMatch(/^rs_/);
    await finish(second);
  }, 180_000);

  it("with turn_detection null, a connection cut after 3 s of appended audio resumes, and a commit right after the resume commits that audio (the door cannot count what came before the cut: an empty commit is left to the session)", async () => {
    const c = await connectRt(doorUrl(stack.baseUrl), bearer(key));
    const created = await c.next("session.created");
    c.sendJson({ type: "session.update", session: { type: "transcription", audio: { input: { turn_detection: null } } } });
    await c.next("session.updated");
    const jfk = createResampler(16000, 24000, 1).push(fixture("jfk.wav"));
    await appendPcm(c, jfk.subarray(0, 24000 * 3));
    await new Promise((r) => setTimeout(r, 1000)); // the appends reach the session
    cut(c);
    await c.closed;
    const second = await connectRt(doorUrl(stack.baseUrl, resumeQuery(created.resume.credential, lastEventId(c.events))), bearer(key));
    const resumed = await second.next("session.resumed");
    expect(resumed.audio_ms).toBeGreaterThan(2500);
    second.sendJson({ type: "input_audio_buffer.commit", event_id: "commit_after_resume" });
    const committed = await second.next("input_audio_buffer.committed", 30_000);
    await outcomes(() => second.events);
    expect(second.events.filter((e) => e.type === "error")).toEqual([]);
    const completed = second.events.find((e) => e.type === `${T}.completed` && e.item_id === committed.item_id);
    expect(completed.transcript.split(" ").length).toBeGreaterThan(3);
    // nothing appended since: refused, as without a cut
    second.sendJson({ type: "input_audio_buffer.commit", event_id: "empty_commit" });
    expect((await second.next("error")).error).toMatchObject({ code: "input_audio_buffer_commit_empty", event_id: "empty_commit" });
    await finish(second);
  }, 120_000);

  it("a gateway stopped with SIGTERM holds its door sessions (1012): the client resumes through the door on another gateway", async () => {
    const child = await startServiceProcess(stack, "realtime-gateway");
    children.push(child);
    const first = await connectRt(doorUrl(`http://127.0.0.1:${child.port}`), bearer(key));
    const created = await first.next("session.created");
    const pcm = speech24();
    const at = 5 * 24000;
    await appendPcm(first, pcm.subarray(0, at));
    const stopping = child.stop();
    expect(await first.closed).toEqual({ code: 1012, reason: "gateway_restarting" });
    await stopping;
    const second = await connectRt(doorUrl(stack.baseUrl, resumeQuery(created.resume.credential, lastEventId(first.events))), bearer(key));
    const resumed = await second.next("session.resumed");
    expect(resumed.audio_ms * 24).toBeGreaterThan(at - 24000);
    await appendPcm(second, pcm.subarray(resumed.audio_ms * 24));
    const all = () => [...first.events, ...second.events];
    await outcomes(all);
    await finish(second);
    expect(transcripts(all())).toEqual(baseline);
  }, 240_000);

  it("the gateway process serving a door session is killed with SIGKILL mid-stream: resumed through the door on another gateway, in the beta shapes it was opened with, no committed item lost", async () => {
    const child = await startServiceProcess(stack, "realtime-gateway");
    children.push(child);
    const first = await connectRt(doorUrl(`http://127.0.0.1:${child.port}`), { ...bearer(key), "openai-beta": "realtime=v1" });
    const created = await first.next("transcription_session.created");
    const pcm = speech24();
    const at = Math.round((fixture("jfk.wav").length / 16000 + 4) * 24000); // inside the second jfk
    await appendPcm(first, pcm.subarray(0, at));
    await child.kill();
    expect((await first.closed).code).toBe(1006);
    const second = await connectRt(doorUrl(stack.baseUrl, resumeQuery(created.resume.credential, lastEventId(first.events))), bearer(key));
    const resumed = await second.next("session.resumed");
    expect(resumed.audio_ms * 24).toBeLessThanOrEqual(at);
    await appendPcm(second, pcm.subarray(resumed.audio_ms * 24));
    const all = () => [...first.events, ...second.events];
    await outcomes(all);
    await finish(second);
    const committed = all().filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
    expect(new Set(committed).size).toBe(committed.length);
    expect([...committed].sort()).toEqual((await storedItems(stack.nats, created.session.id)).sort());
    for (const item of committed) expect(all().filter((e) => isOutcome(e) && e.item_id === item)).toHaveLength(1);
    expect(second.events.some((e) => e.type === "conversation.item.created")).toBe(true);
    expect(second.events.some((e) => e.type === "conversation.item.added")).toBe(false);
    const ids = all().map((e) => e.event_id);
    expect(new Set(ids).size).toBe(ids.length);
  }, 240_000);

  it("refuses a forged credential, an unknown or garbage last_event_id, and a credential presented on the other door", async () => {
    const c = await connectRt(doorUrl(stack.baseUrl), bearer(key));
    const created = await c.next("session.created");
    const credential: string = created.resume.credential;
    const forged = issueResumeCredential("not-the-secret", { sessionId: created.session.id, keyId: "key_x", ownerId: "tenant-door-resume", gen: 0 }, 60_000, Date.now());
    for (const bad of [forged, `${credential}x`]) {
      const r = await refusal(doorUrl(stack.baseUrl, resumeQuery(bad, null)), bearer(key));
      expect(r.status).toBe(401);
      expect(r.body.error.code).toBe("invalid_resume_credential");
    }
    for (const unknown of ["event_evt_0123456789abcdef01234567_0", "garbage", "evt_0123456789abcdef01234567"]) {
      const r = await refusal(doorUrl(stack.baseUrl, resumeQuery(credential, unknown)), bearer(key));
      expect(r.status, unknown).toBe(400);
      expect(r.body.error.code).toBe("resume_event_unknown");
    }
    // a door session's credential on the native path, and a native session's on the door
    const onNative = await refusal(wsUrl(stack.baseUrl, resumeQuery(credential, null)), bearer(key));
    expect(onNative.status).toBe(409);
    expect(onNative.body.error.code).toBe("resume_wrong_door");
    const native = await connectRt(wsUrl(stack.baseUrl), bearer(key));
    const nativeCreated = await native.next("session.created");
    const onDoor = await refusal(doorUrl(stack.baseUrl, resumeQuery(nativeCreated.resume.credential, null)), bearer(key));
    expect(onDoor.status).toBe(409);
    expect(onDoor.body.error.code).toBe("resume_wrong_door");
    // none of these spent the credentials or disturbed the sessions
    const taken = await connectRt(doorUrl(stack.baseUrl, resumeQuery(credential, null)), bearer(key));
    await taken.next("session.resumed");
    expect(await c.closed).toEqual({ code: 4409, reason: "session_taken_over" });
    native.ws.close(1000);
    await finish(taken);

    // garbage where the door's state is stored (KV, the ownership entry's `door`): the resume is refused, the session not taken
    const d = await connectRt(doorUrl(stack.baseUrl), bearer(key));
    const dCreated = await d.next("session.created");
    const kv = await stack.nats.kv("leases");
    const own = `rt.own.${dCreated.session.id}`;
    const entry = JSON.parse((await kv.get(own))!.string());
    await kv.put(own, JSON.stringify({ ...entry, door: { config: "garbage" } }));
    const lost = await refusal(doorUrl(stack.baseUrl, resumeQuery(dCreated.resume.credential, null)), bearer(key));
    expect(lost.status).toBe(410);
    expect(lost.body.error.code).toBe("resume_state_lost");
    expect(d.ws.readyState).toBe(WebSocket.OPEN);
    await finish(d);
  }, 60_000);
});
