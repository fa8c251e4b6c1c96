import { execFileSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { OPENAI_REALTIME_PATH } from "../schemas/openai-realtime";
import { encodeWav } from "../shared/audio/wav";
import { concatPcm } from "./support/fixtures";
import { appendToOpenAiDoor, connectRt, fixture, RELAXED_ADMISSION, silence, streamPcm, wsUrl } from "./support/realtime-support";
import { cut, lastEventId, outcomes, resume as resumeAt } from "./support/resume";
import { oneVoiceTwoChannels } from "./support/speaker-fold";
import { startStack, type Stack } from "./support/stack";

/**
 * Live speaker labels (`diarize: true`, docs/diarization.md "Realtime sessions"): a
 * conversation of two real people, silero_test.wav's reader (A) and JFK (B), taking
 * turns with a second between them, streamed (at four times real time: labels do not depend on the pace) through the native door and
 * through the OpenAI door. Every completed item carries a speaker; A's items share one
 * label and B's another, from the first item of each to the last; no item is labelled
 * twice. And one person heard through a telephone, a microphone and the telephone again
 * (support/speaker-fold.ts): the microphone's label is folded into the first, said once by
 * `conversation.speaker.merged`, stored and replayed like every session event.
 */
const T = "conversation.item.input_audio_transcription";
let stack: Stack;
let key: string;

const A = fixture("silero_test.wav");
const B = fixture("jfk.wav");
const s = (pcm: Int16Array, from: number, to: number) => pcm.subarray(Math.round(from * 16_000), Math.round(to * 16_000));
/** Turns: who and what, 1 s of silence after each. */
const TURNS: Array<["A" | "B", Int16Array]> = [
  ["A", s(A, 0, 7)],
  ["B", s(B, 0, 5.3)],
  ["A", s(A, 7, 14)],
  ["B", s(B, 5.3, 11)],
  ["A", s(A, 14, 20)],
];
const CONVERSATION = concatPcm(...TURNS.flatMap(([, pcm]) => [pcm, silence(1)]), silence(1));
/** Where each turn starts and ends on the session timeline (ms). */
const SPANS = (() => {
  let at = 0;
  return TURNS.map(([who, pcm]) => {
    const span = { who, start: at / 16, end: (at + pcm.length) / 16 };
    at += pcm.length + 16_000;
    return span;
  });
})();
/** The reference speaker of an item: the turn it overlaps most. */
const whoSaid = (startMs: number, endMs: number) => SPANS.map((t) => ({ who: t.who, o: Math.min(endMs, t.end) - Math.max(startMs, t.start) })).sort((a, b) => b.o - a.o)[0]!.who;

beforeAll(async () => {
  stack = await startStack({ ...RELAXED_ADMISSION });
  key = (await stack.issueKey("pro")).key;
});
afterAll(async () => {
  await stack?.stop();
});

/** Items by reference speaker, in order: [label, item] pairs. */
function expectTwoVoices(completed: Array<{ item_id: string; speaker?: string; audio_start_ms: number; audio_end_ms: number }>) {
  expect(completed.length).toBeGreaterThanOrEqual(TURNS.length);
  for (const c of completed) expect(c.speaker, JSON.stringify(c)).toMatch(/^speaker_\d+$/);
  expect(new Set(completed.map((c) => c.item_id)).size).toBe(completed.length);
  const by = (who: "A" | "B") => completed.filter((c) => whoSaid(c.audio_start_ms, c.audio_end_ms) === who).map((c) => c.speaker);
  const a = by("A");
  const b = by("B");
  console.log(`A: ${a.join(" ")} | B: ${b.join(" ")}`);
  // the first and the last item of each speaker agree, all but one item at most carry it, and the two differ
  expect(a.at(-1)).toBe(a[0]);
  expect(b.at(-1)).toBe(b[0]);
  expect(a.filter((x) => x === a[0]).length).toBeGreaterThanOrEqual(a.length - 1);
  expect(b.filter((x) => x === b[0]).length).toBeGreaterThanOrEqual(b.length - 1);
  expect(a[0]).not.toBe(b[0]);
}

/** The folds a session announced, checked: each label folded once, into an earlier one, and never given again after its fold. */
function expectFoldsSaidOnce(events: any[]) {
  const merged = events.filter((e) => e.type === "conversation.speaker.merged");
  console.log(events.filter((e) => e.type === `${T}.completed` || e.type === "conversation.speaker.merged").map((e) => (e.from ? `${e.from}->${e.into}` : e.speaker)).join(" "));
  expect(merged.length).toBeGreaterThanOrEqual(1);
  expect(new Set(merged.map((m) => m.from)).size).toBe(merged.length);
  const number = (label: string) => Number(/^speaker_(\d+)$/.exec(label)![1]);
  for (const m of merged) {
    expect(number(m.into)).toBeLessThan(number(m.from));
    const after = events.slice(events.indexOf(m) + 1).filter((e) => e.type === `${T}.completed`);
    // the item whose labelling folded it comes after the event, and it and every later item speak as `into`
    expect(after.map((e) => e.item_id)).toContain(m.item_id);
    for (const e of after) {
      expect(e.speaker).not.toBe(m.from);
      for (const w of e.words ?? []) expect(w.speaker).not.toBe(m.from);
    }
  }
  return merged;
}

describe("live speaker labels", () => {
  it("native door: every completed item names its speaker, stable from a speaker's first item to the last", { timeout: 120_000 }, async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    await c.next("session.created");
    c.sendJson({ type: "session.update", session: { input_audio_transcription: { diarize: true, max_speakers: 4, speaker_roles: { "0": "reader", "1": "president" } } } });
    const updated = await c.next("session.updated");
    expect(updated.session.input_audio_transcription).toMatchObject({ diarize: true, max_speakers: 4, speaker_roles: { "0": "reader", "1": "president" } });
    await streamPcm(c, CONVERSATION, { speed: 4 });
    c.sendJson({ type: "session.close" });
    await c.closed;
    const completed = c.events.filter((e) => e.type === `${T}.completed`);
    expectTwoVoices(completed);
    // the roles name the speakers as a job's metadata.speaker_roles does: the reader spoke first
    for (const e of completed) expect(e.speaker_role).toBe(({ speaker_0: "reader", speaker_1: "president" } as Record<string, string>)[e.speaker]);
    expect(completed.filter((e) => whoSaid(e.audio_start_ms, e.audio_end_ms) === "B").every((e) => e.speaker_role === "president")).toBe(true);
  });

  it("a session cut between turns and resumed keeps its speakers: the same labels for the same people after the resume", { timeout: 120_000 }, async () => {
    let c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    const created = await c.next("session.created");
    const connections = [c];
    c.sendJson({ type: "session.update", session: { input_audio_transcription: { diarize: true } } });
    await c.next("session.updated");
    // A, B, A, then the cut in the second of silence after the third turn
    const at = Math.round((SPANS[2]!.end + 500) * 16);
    await streamPcm(c, CONVERSATION.subarray(0, at), { speed: 4 });
    cut(c);
    await c.closed;
    await new Promise((r) => setTimeout(r, 1000));
    c = await resumeAt(stack.baseUrl, created.resume.credential, lastEventId(connections.flatMap((x) => x.events)), key);
    connections.push(c);
    const resumed = await c.next("session.resumed");
    await streamPcm(c, CONVERSATION.subarray(resumed.audio_ms * 16), { speed: 4 });
    c.sendJson({ type: "session.close" });
    await c.closed;
    const all = connections.flatMap((x) => x.events);
    const completed = all.filter((e) => e.type === `${T}.completed`);
    // both people speak on both sides of the cut
    expect(completed.some((e) => e.audio_start_ms > at / 16 && whoSaid(e.audio_start_ms, e.audio_end_ms) === "A")).toBe(true);
    expectTwoVoices(completed);
  });

  it("native door: one person through two channels gets a second label, folded into the first once, by an event stored and replayed", { timeout: 120_000 }, async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    const created = await c.next("session.created");
    c.sendJson({ type: "session.update", session: { input_audio_transcription: { diarize: true } } });
    await c.next("session.updated");
    await streamPcm(c, oneVoiceTwoChannels(), { speed: 4 });
    await outcomes(() => c.events);
    const merged = expectFoldsSaidOnce(c.events);
    const completed = c.events.filter((e) => e.type === `${T}.completed`);
    expect(new Set(completed.map((e) => e.item_id)).size).toBe(completed.length);
    // the folded label was given before its fold (on an item or a run of one)
    const before = c.events.slice(0, c.events.indexOf(merged[0])).filter((e) => e.type === `${T}.completed`);
    expect(before.flatMap((e) => [e.speaker, ...e.words.map((w: { speaker?: string }) => w.speaker)])).toContain(merged[0].from);
    // a resume from before the fold replays it, with the same event id
    const previous = c.events[c.events.indexOf(merged[0]) - 1];
    cut(c);
    await c.closed;
    const r = await resumeAt(stack.baseUrl, created.resume.credential, previous.event_id, key);
    await r.next("session.resumed");
    const replayed = await r.next("conversation.speaker.merged");
    expect(replayed).toMatchObject({ event_id: merged[0].event_id, item_id: merged[0].item_id, from: merged[0].from, into: merged[0].into });
    r.sendJson({ type: "session.close" });
    await r.closed;
    expect(r.events.filter((e) => e.type === "conversation.speaker.merged")).toHaveLength(merged.length);
  });

  it("refuses a count without diarize, and both kinds of count at once", async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    await c.next("session.created");
    c.sendJson({ type: "session.update", event_id: "u1", session: { input_audio_transcription: { speakers: 2 } } });
    expect((await c.next("error")).error).toMatchObject({ code: "invalid_event", event_id: "u1" });
    c.sendJson({ type: "session.update", event_id: "u2", session: { input_audio_transcription: { diarize: true, speakers: 2, max_speakers: 3 } } });
    expect((await c.next("error")).error).toMatchObject({ code: "invalid_event", event_id: "u2" });
    c.sendJson({ type: "session.update", event_id: "u3", session: { input_audio_transcription: { diarize: true, speakers: 11 } } });
    expect((await c.next("error")).error).toMatchObject({ event_id: "u3" });
    c.sendJson({ type: "session.update", event_id: "u4", session: { input_audio_transcription: { diarize: true, speaker_roles: { agent: "0" } } } });
    expect((await c.next("error")).error).toMatchObject({ event_id: "u4", param: expect.stringContaining("speaker_roles") });
    c.sendJson({ type: "session.close" });
    await c.closed;
  });

  it("OpenAI door: `speaker_roles` as on the native door, `speaker_role` on completed, the fold as the same extension event", { timeout: 120_000 }, async () => {
    const c = await connectRt(`${stack.baseUrl.replace(/^http/, "ws")}${OPENAI_REALTIME_PATH}?intent=transcription`, { authorization: `Bearer ${key}` });
    await c.next("session.created");
    const update = (event_id: string, transcription: object) => c.sendJson({ type: "session.update", event_id, session: { type: "transcription", audio: { input: { transcription: { language: "en", ...transcription } } } } });
    // refused as the native door refuses them, and the session keeps its settings
    update("bad-role", { diarize: true, speaker_roles: { agent: "0" } });
    expect((await c.next("error")).error).toMatchObject({ event_id: "bad-role", param: expect.stringContaining("speaker_roles") });
    update("count-alone", { speakers: 2 });
    expect((await c.next("error")).error).toMatchObject({ code: "invalid_event", event_id: "count-alone" });
    update("ok", { diarize: true, speaker_roles: { "0": "president" } });
    const updated = await c.next("session.updated");
    expect(updated.session.audio.input.transcription).toMatchObject({ diarize: true, speaker_roles: { "0": "president" } });
    await appendToOpenAiDoor(c, oneVoiceTwoChannels());
    await outcomes(() => c.events);
    expectFoldsSaidOnce(c.events);
    const completed = c.events.filter((e) => e.type === `${T}.completed`);
    for (const e of completed) expect(e.speaker_role, JSON.stringify(e)).toBe(e.speaker === "speaker_0" ? "president" : undefined);
    expect(completed.at(-1).speaker).toBe("speaker_0");
    c.sendJson({ type: "session.close" });
    await c.closed;
  });

  it("OpenAI door: `diarize` as an extension of the transcription settings, `speaker` on each completed item", { timeout: 120_000 }, async () => {
    const pcm24 = execFileSync("ffmpeg", ["-v", "error", "-f", "wav", "-i", "pipe:0", "-ar", "24000", "-f", "s16le", "pipe:1"], { input: encodeWav(CONVERSATION), maxBuffer: 1 << 26 });
    const ws = new WebSocket(`${stack.baseUrl.replace(/^http/, "ws")}${OPENAI_REALTIME_PATH}?intent=transcription`, { headers: { authorization: `Bearer ${key}` } });
    const events: any[] = [];
    ws.on("message", (m) => events.push(JSON.parse(m.toString())));
    await new Promise((resolve, reject) => (ws.once("open", resolve), ws.once("error", reject)));
    const until = async (done: () => boolean, ms = 90_000) => {
      const deadline = Date.now() + ms;
      while (!done()) {
        if (Date.now() > deadline) throw new Error(`timed out; got ${events.map((e) => e.type).join(", ")}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    ws.send(JSON.stringify({ type: "session.update", session: { type: "transcription", audio: { input: { format: { type: "audio/pcm", rate: 24000 }, transcription: { model: "gpt-4o-transcribe", language: "en", diarize: true } } } } }));
    await until(() => events.some((e) => e.type === "session.updated"));
    const start = Date.now();
    const chunk = 4800; // 100 ms
    for (let at = 0; at < pcm24.length; at += chunk) {
      ws.send(JSON.stringify({ type: "input_audio_buffer.append", audio: pcm24.subarray(at, at + chunk).toString("base64") }));
      const wait = start + ((at + chunk) * 1000) / (4 * 48_000) - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
    const done = () => {
      const items = events.filter((e) => e.type === "input_audio_buffer.committed").map((e) => e.item_id);
      const finished = events.filter((e) => e.type === `${T}.completed` || e.type === `${T}.failed`).map((e) => e.item_id);
      return items.length >= TURNS.length && items.every((i: string) => finished.includes(i));
    };
    await until(done);
    ws.close();
    // OpenAI's completed has no times: the committed event's item order gives them (audio_start_ms/audio_end_ms of speech_started/stopped)
    const started = new Map(events.filter((e) => e.type === "input_audio_buffer.speech_started").map((e) => [e.item_id, e.audio_start_ms]));
    const stopped = new Map(events.filter((e) => e.type === "input_audio_buffer.speech_stopped").map((e) => [e.item_id, e.audio_end_ms]));
    const completed = events.filter((e) => e.type === `${T}.completed`).map((e) => ({ item_id: e.item_id, speaker: e.speaker, audio_start_ms: started.get(e.item_id) ?? 0, audio_end_ms: stopped.get(e.item_id) ?? 0 }));
    expectTwoVoices(completed);
  });
});
