import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./support/stack";
import { connectRt, fixture, refusal, silence, streamPcm, wsUrl, type RtClient } from "./support/realtime-support";
import { concatPcm } from "./support/fixtures";
import { cut, finals, finish, isOutcome, lastEventIds, outcomes, resume, speech, storedBeyond, storedItems } from "./support/resume";
import { readSessionRecords } from "../services/realtime-gateway/session-records";
import { startServiceProcess, type ServiceProcess } from "./support/service-process";

/**
 * Resuming a multichannel session (issue 30 with issue 29's lanes; docs/realtime-resume.md,
 * "Multichannel") on the real stack: two different recordings
 * interleaved as a stereo stream, the TCP connection cut mid-utterance and again while
 * one channel pauses and the other speaks, resumed with one position per channel; a
 * gateway killed (SIGKILL) or stopped (SIGTERM) under a stereo call; and positions that
 * must be refused.
 */
let stack: Stack;
let key: string;
const children: ServiceProcess[] = [];

beforeAll(async () => {
  // the commit path (exact transcripts compare across runs), with room for PocketSphinx on a shared 2-core machine
  stack = await startStack({ POCKETSPHINX_REAL_TIME_FACTOR: "6", RT_MAX_TRANSCRIPT_WAIT_MS: "60000", RT_STREAM_DECODERS: "0" });
  key = (await stack.issueKey("pro", "tenant-resume-multichannel")).key;
});
afterAll(async () => {
  for (const c of children) await c.kill().catch(() => undefined);
  await stack?.stop();
});

const QUERY = "sample_rate=16000&channels=2&multichannel=true";
const connect = () => connectRt(wsUrl(stack.baseUrl, QUERY), { authorization: `Bearer ${key}` });
const laneId = (sessionId: string, channel: number) => `sess_ch${channel}_${sessionId.slice(5)}`;

/** Channel 0: jfk twice with pauses (resume.ts speech); channel 1: ldc93s1 at 1 s and again at 11.5 s, silence around. */
function call(): { pcm: Int16Array; frames: number } {
  const left = speech();
  const ldc = fixture("ldc93s1.wav");
  const right = concatPcm(silence(1), ldc, silence(11.5 - 1 - ldc.length / 16000), ldc);
  const frames = left.length;
  const pcm = new Int16Array(frames * 2);
  for (let i = 0; i < frames; i++) {
    pcm[2 * i] = left[i]!;
    pcm[2 * i + 1] = right[i] ?? 0;
  }
  return { pcm, frames };
}
/** Frames [from, to) of the interleaved call. */
const slice = (pcm: Int16Array, from: number, to?: number) => pcm.subarray(from * 2, to === undefined ? undefined : to * 2);
const stream = (c: RtClient, pcm: Int16Array) => streamPcm(c, pcm, { speed: 4, chunkBytes: 3200 });
const onChannel = (events: any[], channel: number) => events.filter((e) => e.channel === channel);

describe("resuming a multichannel session", () => {
  const baseline: ReturnType<typeof finals>[] = [];

  it("an uninterrupted run of the stereo call (the reference)", async () => {
    const { pcm } = call();
    const c = await connect();
    const created = await c.next("session.created");
    expect(created.audio.multichannel).toBe(true);
    expect(created.resume).toMatchObject({ credential: expect.stringMatching(/^rs_/), grace_seconds: 30 });
    await stream(c, pcm);
    await outcomes(() => c.events);
    await finish(c);
    for (const channel of [0, 1]) baseline.push(finals(onChannel(c.events, channel)));
    console.log(baseline.map((b, ch) => `ch${ch}: ${b.map((f) => f.transcript).join(" | ")}`).join("\n"));
    expect(baseline[0]!.length).toBeGreaterThanOrEqual(4);
    expect(baseline[1]!.length).toBeGreaterThanOrEqual(2);
  }, 240_000);

  it("cut mid-utterance on both channels, then while channel 0 pauses and channel 1 speaks: resumed with one position per channel, each channel's finals equal the uninterrupted run's, no event twice, none missing", async () => {
    const { pcm, frames } = call();
    const connections: RtClient[] = [];
    let c = await connect();
    connections.push(c);
    const created = await c.next("session.created");
    let credential: string = created.resume.credential;
    // 2.0 s: inside jfk's first words (channel 0) and ldc93s1 (channel 1); 12.2 s: channel 0's pause after the first jfk, channel 1's second ldc93s1
    const cuts = [2.0 * 16000, fixture("jfk.wav").length + 1.2 * 16000];
    let from = 0;
    const replayed: number[] = [];
    for (const at of cuts) {
      await stream(c, slice(pcm, from, at));
      cut(c);
      await c.closed;
      await new Promise((r) => setTimeout(r, 2000));
      const seen = connections.flatMap((x) => x.events);
      // after the second cut channel 0's last utterance is committed and transcribed while away: wait until it is stored
      if (at === cuts[1]) await storedBeyond(stack.nats, laneId(created.session_id, 0), onChannel(seen, 0));
      const positions = lastEventIds(seen, 2);
      expect(positions.split(",")).toHaveLength(2);
      c = await resume(stack.baseUrl, credential, positions, key);
      connections.push(c);
      const resumed = await c.next("session.resumed");
      expect(resumed.session_id).toBe(created.session_id);
      expect(resumed.audio_ms * 16).toBeLessThanOrEqual(at);
      expect(resumed.audio_ms * 16).toBeGreaterThan(at - 16000);
      credential = resumed.resume.credential;
      from = resumed.audio_ms * 16;
      replayed.push(resumed.replayed);
      // the replayed events come right after session.resumed, exactly as many as announced, each of a channel
      const after = c.events.slice(c.events.indexOf(resumed) + 1, c.events.indexOf(resumed) + 1 + resumed.replayed);
      expect(after.every((e) => e.channel === 0 || e.channel === 1)).toBe(true);
    }
    await stream(c, slice(pcm, from, frames));
    await outcomes(() => connections.flatMap((x) => x.events));
    await finish(c);
    expect(replayed.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);

    const all = connections.flatMap((x) => x.events);
    await expectEveryChannelWhole(created.session_id, all);
    for (const channel of [0, 1]) {
      const mine = onChannel(all, channel);
      // each channel's timeline keeps growing across the connections
      const starts = mine.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.audio_start_ms);
      expect([...starts].sort((a, b) => a - b)).toEqual(starts);
      expect(finals(mine), `channel ${channel}`).toEqual(baseline[channel]);
    }
  }, 300_000);

  /** Every channel: no item twice, each committed item's one outcome, everything its lane stored delivered; no event id twice. */
  async function expectEveryChannelWhole(sessionId: string, all: any[]) {
    const ids = all.filter((e) => typeof e.event_id === "string").map((e) => e.event_id);
    expect(new Set(ids).size, "no event twice").toBe(ids.length);
    for (const channel of [0, 1]) {
      const mine = onChannel(all, channel);
      const committed = mine.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
      expect(new Set(committed).size, `channel ${channel}: no item twice`).toBe(committed.length);
      for (const item of committed) expect(mine.filter((e) => isOutcome(e) && e.item_id === item)).toHaveLength(1);
      expect(committed.sort()).toEqual((await storedItems(stack.nats, laneId(sessionId, channel))).sort());
    }
  }

  it("the gateway process serving a stereo call is killed with SIGKILL mid-stream: resumed on another gateway with one position per channel, no committed item of either channel lost or doubled", async () => {
    const child = await startServiceProcess(stack, "realtime-gateway");
    children.push(child);
    const { pcm, frames } = call();
    const first = await connectRt(wsUrl(`http://127.0.0.1:${child.port}`, QUERY), { authorization: `Bearer ${key}` });
    const created = await first.next("session.created");
    const at = fixture("jfk.wav").length + 4 * 16000; // inside channel 0's second jfk, after channel 1's second ldc93s1 began
    await stream(first, slice(pcm, 0, at));
    await child.kill();
    expect((await first.closed).code).toBe(1006);

    const second = await resume(stack.baseUrl, created.resume.credential, lastEventIds(first.events, 2), key);
    const resumed = await second.next("session.resumed");
    expect(resumed.session_id).toBe(created.session_id);
    expect(resumed.audio_ms * 16).toBeLessThanOrEqual(at);
    await stream(second, slice(pcm, resumed.audio_ms * 16, frames));
    const all = () => [...first.events, ...second.events];
    await outcomes(all);
    await finish(second);
    await expectEveryChannelWhole(created.session_id, all());
    for (const channel of [0, 1]) expect(onChannel(all(), channel).some((e) => e.type === "input_audio_buffer.committed"), `channel ${channel}`).toBe(true);
  }, 300_000);

  it("a gateway stopped with SIGTERM holds its stereo calls (1012): resumed on another gateway, each channel's finals equal the uninterrupted run's", async () => {
    const child = await startServiceProcess(stack, "realtime-gateway");
    children.push(child);
    const { pcm, frames } = call();
    const first = await connectRt(wsUrl(`http://127.0.0.1:${child.port}`, QUERY), { authorization: `Bearer ${key}` });
    const created = await first.next("session.created");
    const at = 5 * 16000; // inside channel 0's first jfk, after channel 1's first ldc93s1
    await stream(first, slice(pcm, 0, at));
    const stopping = child.stop();
    expect(await first.closed).toEqual({ code: 1012, reason: "gateway_restarting" });
    await stopping;

    const second = await resume(stack.baseUrl, created.resume.credential, lastEventIds(first.events, 2), key);
    const resumed = await second.next("session.resumed");
    // the stopping gateway stored all the audio it had before letting go
    expect(resumed.audio_ms * 16).toBeGreaterThan(at - 16000);
    await stream(second, slice(pcm, resumed.audio_ms * 16, frames));
    const all = () => [...first.events, ...second.events];
    await outcomes(all);
    await finish(second);
    await expectEveryChannelWhole(created.session_id, all());
    for (const channel of [0, 1]) expect(finals(onChannel(all(), channel)), `channel ${channel}`).toEqual(baseline[channel]);
  }, 300_000);

  it("refuses positions of another count, garbage, or another channel's event (400 resume_event_unknown), and resumes after", async () => {
    const { pcm } = call();
    const c = await connect();
    const created = await c.next("session.created");
    await stream(c, slice(pcm, 0, 5 * 16000));
    await c.next("input_audio_buffer.committed", 60_000);
    cut(c);
    await c.closed;
    const [ch0, ch1] = lastEventIds(c.events, 2).split(",");
    expect(ch0).toMatch(/^evt_/);
    const credential = encodeURIComponent(created.resume.credential);
    const refused = async (positions: string) => {
      const r = await refusal(wsUrl(stack.baseUrl, `resume=${credential}&last_event_id=${encodeURIComponent(positions)}`), { authorization: `Bearer ${key}` });
      return { status: r.status, code: r.body.error?.code };
    };
    const unknown = { status: 400, code: "resume_event_unknown" };
    expect(await refused(ch0!)).toEqual(unknown); // one id for two channels
    expect(await refused(`${ch0},${ch1},evt_0`)).toEqual(unknown);
    expect(await refused(`${ch0},not-an-event`)).toEqual(unknown);
    expect(await refused(`${ch0},evt_0123456789abcdef01234567`)).toEqual(unknown);
    // channel 0's event named as channel 1's: not an event of that channel's lane
    expect(await refused(`evt_0,${ch0}`)).toEqual(unknown);
    // none of those spent the credential. Each channel replays after its own position: channel 1's named
    // further back (as a client that had processed less of it) gets again what followed there; channel 0 from its start
    const ids = (events: any[], channel: number) => onChannel(events, channel).map((e) => e.event_id);
    const replayOf = (x: RtClient, resumed: any) => x.events.slice(x.events.indexOf(resumed) + 1, x.events.indexOf(resumed) + 1 + resumed.replayed);
    const seenCh1 = ids(c.events, 1);
    expect(seenCh1.at(-1)).toBe(ch1);
    expect(seenCh1.length).toBeGreaterThanOrEqual(3);
    const second = await resume(stack.baseUrl, created.resume.credential, `evt_0,${seenCh1[0]}`, key);
    const resumed = await second.next("session.resumed");
    expect(resumed.session_id).toBe(created.session_id);
    const replay = replayOf(second, resumed);
    expect(replay).toHaveLength(resumed.replayed);
    expect(ids(replay, 1).slice(0, seenCh1.length - 1)).toEqual(seenCh1.slice(1));
    expect(ids(replay, 0).slice(0, ids(c.events, 0).length)).toEqual(ids(c.events, 0));
    // session.resumed stands where channel 0's position stood, before the replay: a client that processed
    // it and nothing after (cut at once) gets the same replay again, under another session.resumed id
    cut(second);
    await second.closed;
    const third = await resume(stack.baseUrl, resumed.resume.credential, `${resumed.event_id},${seenCh1[0]}`, key);
    const again = await third.next("session.resumed");
    expect(again.event_id).not.toBe(resumed.event_id);
    expect(ids(replayOf(third, again), 0).slice(0, ids(replay, 0).length)).toEqual(ids(replay, 0));
    await finish(third);
  }, 120_000);

  it("a held multichannel session whose grace passes ends as a close would: every channel's VAD state goes, the closed fact is written", async () => {
    const { key: shortKey } = await stack.issueKey("pro", "tenant-resume-multichannel-short", { limits: { resumeGraceSeconds: 1 } });
    const c = await connectRt(wsUrl(stack.baseUrl, QUERY), { authorization: `Bearer ${shortKey}` });
    const created = await c.next("session.created");
    await stream(c, slice(call().pcm, 0, 16000));
    const kv = await stack.nats.kv("leases");
    const vadSettings = async (channel: number) => {
      const e = await kv.get(`vad.session.${laneId(created.session_id, channel)}`);
      return e?.operation === "PUT" ? e.string() : null;
    };
    for (const channel of [0, 1]) expect(await vadSettings(channel)).not.toBeNull();
    cut(c);
    await c.closed;
    await new Promise((r) => setTimeout(r, 3000));
    const late = await refusal(wsUrl(stack.baseUrl, `resume=${encodeURIComponent(created.resume.credential)}`), { authorization: `Bearer ${shortKey}` });
    expect(late.body.error.code).toBe("resume_expired");
    let closed: any;
    await readSessionRecords(stack.nats, created.session_id, (r) => ((closed = r.type === "rt.session.closed" ? r.data : closed), false), { waitMs: 0 });
    expect(closed).toMatchObject({ code: 1006, reason: "resume_grace_expired" });
    for (const channel of [0, 1]) expect(await vadSettings(channel), `channel ${channel}'s VAD state`).toBeNull();
  }, 60_000);
});
