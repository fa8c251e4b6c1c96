import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./support/stack";
import { connectRt, fixture, refusal, streamPcm, wsUrl, type RtClient } from "./support/realtime-support";
import { cut, finals, finish, isOutcome, lastEventId, outcomes, resume as resumeAt, speech, storedBeyond, storedItems } from "./support/resume";
import { startServiceProcess, type ServiceProcess } from "./support/service-process";
import { issueResumeCredential } from "../domain/sessions/resume";
import { readSessionRecords } from "../services/realtime-gateway/session-records";

/**
 * Resuming a realtime session (issue 30, docs/realtime-resume.md) on the
 * real stack: the client's TCP connection cut mid-utterance and between utterances, a
 * gateway process killed with SIGKILL mid-stream, and the resumes that must be refused.
 */
let stack: Stack;
let proKey: string;
const children: ServiceProcess[] = [];

beforeAll(async () => {
  // PocketSphinx on a shared 2-core machine: give the router's per-attempt timeout room, and the
  // commit path's queue (an item waiting past RT_MAX_TRANSCRIPT_WAIT_MS becomes engine_overloaded,
  // which a busy machine, not the resume, decides)
  stack = await startStack({ POCKETSPHINX_REAL_TIME_FACTOR: "6", RT_MAX_TRANSCRIPT_WAIT_MS: "60000", RT_STREAM_DECODERS: "0" });
  proKey = (await stack.issueKey("pro", "tenant-resume")).key;
});
afterAll(async () => {
  for (const c of children) await c.kill().catch(() => undefined);
  await stack?.stop();
});

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const resume = (base: string, credential: string, after: string | null, key = proKey) => resumeAt(base, credential, after, key);
describe("resuming a realtime session", () => {
  let baseline: ReturnType<typeof finals>;

  it("an uninterrupted run of the audio (the reference)", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), bearer(proKey));
    const created = await c.next("session.created");
    expect(created.resume).toMatchObject({ credential: expect.stringMatching(/^rs_/), grace_seconds: 30 });
    await streamPcm(c, speech(), { speed: 4 });
    await outcomes(() => c.events);
    await finish(c);
    baseline = finals(c.events);
    expect(baseline.length).toBeGreaterThanOrEqual(4);
  }, 180_000);

  it("a connection cut mid-utterance and again between utterances resumes: the finals equal the uninterrupted run's, no event twice, none missing", async () => {
    const pcm = speech();
    const connections: RtClient[] = [];
    let c = await connectRt(wsUrl(stack.baseUrl), bearer(proKey));
    connections.push(c);
    const created = await c.next("session.created");
    let credential: string = created.resume.credential;
    // mid-utterance: 2.0 s into "And so my fellow Americans"; between utterances: in the 1.5 s pause after the first jfk
    const cuts = [2.0 * 16000, fixture("jfk.wav").length + 1.2 * 16000];
    let from = 0;
    const replayed: number[] = [];
    for (const at of cuts) {
      await streamPcm(c, pcm.subarray(from, at), { speed: 4 });
      cut(c);
      await c.closed;
      // away for a while (a network switch): what the session decides meanwhile waits in the stream.
      // After the cut between utterances, the last one's commit and transcript are decided while
      // away: wait until one is stored (a loaded machine is later than 2 s), so the replay has it to give.
      await new Promise((r) => setTimeout(r, 2000));
      if (at === cuts[1]) await storedBeyond(stack.nats, created.session_id, connections.flatMap((x) => x.events));
      c = await resume(stack.baseUrl, credential, lastEventId(connections.flatMap((x) => x.events)));
      connections.push(c);
      const resumed = await c.next("session.resumed");
      expect(resumed.session_id).toBe(created.session_id);
      // what the session has of the audio: at most what was sent, and nothing of the utterance lost
      expect(resumed.audio_ms * 16).toBeLessThanOrEqual(at);
      expect(resumed.audio_ms * 16).toBeGreaterThan(at - 16000);
      credential = resumed.resume.credential;
      from = resumed.audio_ms * 16;
      replayed.push(resumed.replayed);
      // the replayed events come first, exactly as many as announced
      const firstLive = c.events.indexOf(resumed) + 1 + resumed.replayed;
      expect(c.events.slice(c.events.indexOf(resumed) + 1, firstLive).every((e) => e.type !== "session.resumed")).toBe(true);
    }
    await streamPcm(c, pcm.subarray(from), { speed: 4 });
    await outcomes(() => connections.flatMap((x) => x.events));
    await finish(c);
    // the first cut fell inside an utterance: its speech started before the cut and it was committed after
    const firstItem = connections[0]!.events.find((e) => e.type === "input_audio_buffer.speech_started");
    expect(connections[0]!.events.some((e) => e.type === "input_audio_buffer.committed" && e.item_id === firstItem.item_id)).toBe(false);
    // what the session decided while the client was away reached it in the replays
    expect(replayed.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);

    const all = connections.flatMap((x) => x.events);
    const ids = all.filter((e) => typeof e.event_id === "string").map((e) => e.event_id);
    expect(new Set(ids).size, "no event twice").toBe(ids.length);
    const committed = all.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
    expect(new Set(committed).size).toBe(committed.length);
    // audio_start_ms keeps growing across the connections
    const starts = all.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.audio_start_ms);
    expect([...starts].sort((a, b) => a - b)).toEqual(starts);
    expect(finals(all)).toEqual(baseline);
    // everything the session stored was delivered
    const stored = await storedItems(stack.nats, created.session_id);
    expect(committed.sort()).toEqual(stored.sort());
  }, 240_000);

  it("the gateway process serving a session is killed with SIGKILL mid-stream: the client resumes on another gateway and loses no committed item", async () => {
    const child = await startServiceProcess(stack, "realtime-gateway");
    children.push(child);
    const other = `http://127.0.0.1:${child.port}`;
    const pcm = speech();
    const first = await connectRt(wsUrl(other), bearer(proKey));
    const created = await first.next("session.created");
    const at = fixture("jfk.wav").length + 4 * 16000; // inside the second jfk
    await streamPcm(first, pcm.subarray(0, at), { speed: 4 });
    await child.kill();
    expect((await first.closed).code).toBe(1006);

    const second = await resume(stack.baseUrl, created.resume.credential, lastEventId(first.events));
    const resumed = await second.next("session.resumed");
    expect(resumed.audio_ms * 16).toBeLessThanOrEqual(at);
    await streamPcm(second, pcm.subarray(resumed.audio_ms * 16), { speed: 4 });
    const all = () => [...first.events, ...second.events];
    await outcomes(all);
    await finish(second);

    const committed = all().filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
    expect(new Set(committed).size).toBe(committed.length);
    const stored = await storedItems(stack.nats, created.session_id);
    expect(committed.sort()).toEqual(stored.sort());
    for (const item of committed) expect(all().filter((e) => isOutcome(e) && e.item_id === item)).toHaveLength(1);
    const ids = all().filter((e) => typeof e.event_id === "string").map((e) => e.event_id);
    expect(new Set(ids).size).toBe(ids.length);
  }, 240_000);

  it("a resume on one gateway takes the session from a connection still open on another (4409 there), which lets go first", async () => {
    const child = await startServiceProcess(stack, "realtime-gateway");
    children.push(child);
    const first = await connectRt(wsUrl(`http://127.0.0.1:${child.port}`), bearer(proKey));
    const created = await first.next("session.created");
    await streamPcm(first, speech().subarray(0, 3 * 16000), { speed: 4 });
    const second = await resume(stack.baseUrl, created.resume.credential, lastEventId(first.events));
    const resumed = await second.next("session.resumed");
    expect(await first.closed).toEqual({ code: 4409, reason: "session_taken_over" });
    expect(resumed.audio_ms * 16).toBeGreaterThan(2 * 16000);
    await finish(second);
    await child.stop();
  }, 120_000);

  it("a gateway process that is stopped (SIGTERM, a restart) holds its sessions and says so (1012): the client resumes on another gateway", async () => {
    const child = await startServiceProcess(stack, "realtime-gateway");
    children.push(child);
    const pcm = speech();
    const first = await connectRt(wsUrl(`http://127.0.0.1:${child.port}`), bearer(proKey));
    const created = await first.next("session.created");
    const at = 5 * 16000; // inside the first jfk's second utterance
    await streamPcm(first, pcm.subarray(0, at), { speed: 4 });
    const stopping = child.stop();
    expect(await first.closed).toEqual({ code: 1012, reason: "gateway_restarting" });
    await stopping;
    const second = await resume(stack.baseUrl, created.resume.credential, lastEventId(first.events));
    const resumed = await second.next("session.resumed");
    // the stopping gateway stored all the audio it had before letting go
    expect(resumed.audio_ms * 16).toBeGreaterThan(at - 16000);
    await streamPcm(second, pcm.subarray(resumed.audio_ms * 16), { speed: 4 });
    const all = () => [...first.events, ...second.events];
    await outcomes(all);
    await finish(second);
    expect(finals(all())).toEqual(baseline);
  }, 240_000);

  it("refuses a resume after the grace period, with another owner's credential, a forged one, a spent one, and an unknown event id", async () => {
    // a plan whose grace is 1 s (the bound is 1..120 s)
    const { key: shortKey } = await stack.issueKey("pro", "tenant-short-grace", { limits: { resumeGraceSeconds: 1 } });
    const c = await connectRt(wsUrl(stack.baseUrl), bearer(shortKey));
    const created = await c.next("session.created");
    expect(created.resume.grace_seconds).toBe(1);

    // another owner's key presenting this session's credential
    const { key: otherKey } = await stack.issueKey("pro", "tenant-other");
    const foreign = await refusal(wsUrl(stack.baseUrl, `resume=${encodeURIComponent(created.resume.credential)}`), bearer(otherKey));
    expect(foreign.status).toBe(403);
    expect(foreign.body.error.code).toBe("resume_forbidden");

    // forged: signed with another secret, or tampered with
    const forged = issueResumeCredential("not-the-secret", { sessionId: created.session_id, keyId: "key_x", ownerId: "tenant-short-grace", gen: 0 }, 60_000, Date.now());
    for (const credential of [forged, `${created.resume.credential}x`]) {
      const r = await refusal(wsUrl(stack.baseUrl, `resume=${encodeURIComponent(credential)}`), bearer(shortKey));
      expect(r.status).toBe(401);
      expect(r.body.error.code).toBe("invalid_resume_credential");
    }
    // an event id that is not the session's
    const unknown = await refusal(wsUrl(stack.baseUrl, `resume=${encodeURIComponent(created.resume.credential)}&last_event_id=evt_0123456789abcdef01234567`), bearer(shortKey));
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.code).toBe("resume_event_unknown");

    // a resume takes the session from a connection still open (a half-open one): that one closes 4409
    const second = await resume(stack.baseUrl, created.resume.credential, null, shortKey);
    const resumed = await second.next("session.resumed");
    expect(await c.closed).toEqual({ code: 4409, reason: "session_taken_over" });
    // the first credential is spent
    const spent = await refusal(wsUrl(stack.baseUrl, `resume=${encodeURIComponent(created.resume.credential)}`), bearer(shortKey));
    expect(spent.status).toBe(409);
    expect(spent.body.error.code).toBe("session_resumed_elsewhere");
    // and it did not disturb the connection that drives the session
    await new Promise((r) => setTimeout(r, 200));
    expect(second.ws.readyState).toBe(1);

    // past the grace
    cut(second);
    await second.closed;
    await new Promise((r) => setTimeout(r, 2500));
    const late = await refusal(wsUrl(stack.baseUrl, `resume=${encodeURIComponent(resumed.resume.credential)}`), bearer(shortKey));
    expect(late.status).toBe(410);
    expect(late.body.error.code).toBe("resume_expired");
    // ended as a close would: the closed fact, with the reason
    let closed: any;
    await readSessionRecords(stack.nats, created.session_id, (r) => ((closed = r.type === "rt.session.closed" ? r.data : closed), false), { waitMs: 0 });
    expect(closed).toMatchObject({ code: 1006, reason: "resume_grace_expired" });
  }, 60_000);

  it("a held session keeps its connection slot until its grace passes", async () => {
    const { key } = await stack.issueKey("free", "tenant-one-slot", { limits: { resumeGraceSeconds: 2 } });
    const c = await connectRt(wsUrl(stack.baseUrl), bearer(key));
    await c.next("session.created");
    cut(c);
    await c.closed;
    await new Promise((r) => setTimeout(r, 300));
    const busy = await refusal(wsUrl(stack.baseUrl), bearer(key));
    expect(busy.status).toBe(429);
    expect(busy.body.error.code).toBe("too_many_connections");
    await new Promise((r) => setTimeout(r, 2500));
    const next = await connectRt(wsUrl(stack.baseUrl), bearer(key));
    await next.next("session.created");
    next.ws.close(1000);
    await next.closed;
  }, 30_000);
});
