import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFile } from "node:fs/promises";
import type { VerboseTranscription } from "../schemas/transcription";
import { fixturePath } from "./support/fixtures";
import { startStack, type Stack } from "./support/stack";
import { JFK_WORDS, LDC_WORDS, STEREO_OFFSET_SECONDS, stereoCall } from "./support/stereo";
import type { JobView } from "../schemas/jobs";
import { parseWav } from "../shared/audio/wav";
import { connectRt, fixture, silence, streamPcm, wsUrl } from "./support/realtime-support";
import { serveAudio, submitJob, waitFor, waitForJobEnd, type LocalHttp } from "./support/jobs-helpers";

// Issue 29, multichannel: a stereo call (jfk on channel 0, ldc93s1 on channel 1 from 2 s)
// through the real stack and the embedded PocketSphinx engines.
const CALL = stereoCall();

let stack: Stack;
let pro: { key: string; id: string };

beforeAll(async () => {
  stack = await startStack({ POCKETSPHINX_PROCESSES: "2" });
  pro = await stack.issueKey("pro", "tenant-multichannel");
});
afterAll(async () => {
  await stack?.stop();
});

const post = (bytes: Uint8Array, fields: Record<string, string> = {}, key = pro.key) => {
  const form = new FormData();
  form.set("file", new Blob([new Uint8Array(bytes)]), "call.wav");
  for (const [k, v] of Object.entries(fields)) form.set(k, v);
  return stack.fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: { authorization: `Bearer ${key}` } });
};

/** Lower-case words of one channel in the merged view. */
const wordsOn = (r: { words: { word: string; channel?: number }[] }, channel: number) => r.words.filter((w) => w.channel === channel).map((w) => w.word.toLowerCase());

describe("segment plane: multichannel=true", () => {
  it("transcribes each channel on its own: channels[] and a merged view in time order, every word and segment labelled", async () => {
    const res = await post(CALL, { multichannel: "true" });
    expect(res.status).toBe(200);
    const body = (await res.json()) as VerboseTranscription;
    console.log(`channel 0: ${body.channels?.[0]?.text}\nchannel 1: ${body.channels?.[1]?.text}`);
    expect(body.duration).toBeCloseTo(11, 1);
    expect(body.channels!.map((c) => c.channel)).toEqual([0, 1]);
    // each recording's words on its own channel, and not on the other
    const left = wordsOn(body, 0);
    const right = wordsOn(body, 1);
    expect(JFK_WORDS.some((w) => left.includes(w))).toBe(true);
    expect(LDC_WORDS.filter((w) => right.includes(w)).length).toBeGreaterThanOrEqual(2);
    expect(JFK_WORDS.some((w) => right.includes(w))).toBe(false);
    expect(LDC_WORDS.filter((w) => left.includes(w)).length).toBeLessThan(2);
    // channel 1 speaks from the offset on
    expect(body.channels![1]!.words[0]!.start).toBeGreaterThanOrEqual(STEREO_OFFSET_SECONDS - 0.3);
    // merged: every word and segment labelled, in time order, segments renumbered
    expect(body.words.every((w) => w.channel === 0 || w.channel === 1)).toBe(true);
    expect(body.segments.every((s) => s.channel === 0 || s.channel === 1)).toBe(true);
    const starts = body.words.map((w) => w.start);
    expect(starts).toEqual([...starts].sort((a, b) => a - b));
    expect(body.segments.map((s) => s.id)).toEqual(body.segments.map((_, i) => i));
    expect(new Set(body.segments.map((s) => s.channel))).toEqual(new Set([0, 1]));
    // formatting ran on each channel as on a mono clip
    expect(body.words.every((w) => w.punctuated_word !== undefined)).toBe(true);
  });

  it("billing counts audio seconds per channel: the 11 s stereo call is 22 s", async () => {
    // a key of its own: the usage of the other tests' requests, still being projected, is not its
    const own = await stack.issueKey("pro", "tenant-multichannel-segment-bill");
    const res = await post(CALL, { multichannel: "true", response_format: "json" }, own.key);
    expect(res.status).toBe(200);
    await waitFor(async () => ((await billed(own.id)) > 21.9 ? true : undefined), { timeoutMs: 20_000, what: "the usage projection" });
    expect(await billed(own.id)).toBeCloseTo(22, 1);
  });

  it("SRT and WebVTT cues say the channel", async () => {
    const srt = await (await post(CALL, { multichannel: "true", response_format: "srt" })).text();
    expect(srt).toMatch(/\n\[Channel 0\] \S/);
    expect(srt).toMatch(/\n\[Channel 1\] \S/);
    const vtt = await (await post(CALL, { multichannel: "true", response_format: "vtt" })).text();
    expect(vtt).toMatch(/^WEBVTT\n/);
    expect(vtt).toMatch(/\n<v Channel 0>\S/);
    expect(vtt).toMatch(/\n<v Channel 1>\S/);
  });

  it("a mono clip with multichannel=true is one channel, 0; without multichannel a stereo clip is mixed down as before", async () => {
    const mono = (await (await post(await readFile(fixturePath("ldc93s1.wav")), { multichannel: "true" })).json()) as VerboseTranscription;
    expect(mono.channels!.map((c) => c.channel)).toEqual([0]);
    expect(mono.words.every((w) => w.channel === 0)).toBe(true);
    const mixed = (await (await post(CALL)).json()) as VerboseTranscription;
    expect(mixed.channels).toBeUndefined();
    expect(mixed.words.some((w) => "channel" in w)).toBe(false);
  });

  it("400 too_many_channels past 8 channels; 400 unsupported_combination with stream=true", async () => {
    const nine = await post(silentWav(9, 1), { multichannel: "true" });
    expect(nine.status).toBe(400);
    expect(await nine.json()).toMatchObject({ error: { code: "too_many_channels", param: "multichannel" } });
    const streamed = await post(CALL, { multichannel: "true", stream: "true" });
    expect(streamed.status).toBe(400);
    expect(await streamed.json()).toMatchObject({ error: { code: "unsupported_combination" } });
  });
});

describe("batch plane: multichannel in the job body", () => {
  let audio: LocalHttp;
  beforeAll(async () => {
    audio = await serveAudio(CALL);
  });
  afterAll(async () => {
    await audio?.stop();
  });

  it("slices and transcribes each channel on its own; the result has channels[] and merged segments in time order, billed per channel", async () => {
    const own = await stack.issueKey("pro", "tenant-multichannel-job-bill");
    const { status, workflowId } = await submitJob(stack.fetch, own.key, { audio_url: `${audio.url}/call.wav`, multichannel: true, segment_seconds: 30, language: "en" });
    expect(status).toBe(202);
    const view: JobView = await waitForJobEnd(stack.fetch, own.key, workflowId, { timeoutMs: 120_000 });
    expect(view.error).toBeNull();
    const result = view.output!.result;
    console.log(`job channel 0: ${result.channels?.[0]?.text}\njob channel 1: ${result.channels?.[1]?.text}`);
    expect(result.metadata.chunk_count).toBe(2);
    expect(result.metadata.audio_duration_seconds).toBeCloseTo(11, 1);
    expect(result.channels!.map((c) => c.channel)).toEqual([0, 1]);
    const textOf = (channel: number) => result.channels![channel]!.text.toLowerCase();
    expect(JFK_WORDS.some((w) => textOf(0).includes(w))).toBe(true);
    expect(LDC_WORDS.filter((w) => textOf(1).split(/\W+/).includes(w)).length).toBeGreaterThanOrEqual(2);
    expect(JFK_WORDS.some((w) => textOf(1).includes(w))).toBe(false);
    // merged view: labelled, in time order, numbered from 0
    expect(result.segments.every((s) => s.channel === 0 || s.channel === 1)).toBe(true);
    const starts = result.segments.map((s) => s.start_time);
    expect(starts).toEqual([...starts].sort((a, b) => a - b));
    expect(result.segments.map((s) => s.id)).toEqual(result.segments.map((_, i) => i));
    expect(result.channels![1]!.segments[0]!.start_time).toBeGreaterThanOrEqual(STEREO_OFFSET_SECONDS - 0.3);
    // 11 s × 2 channels
    await waitFor(async () => ((await billed(own.id)) > 21.9 ? true : undefined), { timeoutMs: 20_000, what: "the job's usage" });
    expect(await billed(own.id)).toBeCloseTo(22, 1);
  });

  it("400 unsupported_combination for redact_audio with multichannel", async () => {
    const { status } = await submitJob(stack.fetch, pro.key, { audio_url: `${audio.url}/call.wav`, multichannel: true, redact: "pci", redact_audio: true });
    expect(status).toBe(400);
  });
});

describe("realtime native door: channels=2&multichannel=true", () => {
  const T = "conversation.item.input_audio_transcription";

  it("streams the call interleaved: each channel has its own VAD and items, every item event carries its channel", async () => {
    const wav = parseWav(CALL)!;
    expect(wav.channels).toBe(2);
    const pcm = new Int16Array(wav.data.buffer.slice(wav.data.byteOffset, wav.data.byteOffset + wav.data.byteLength));
    const own = await stack.issueKey("pro", "tenant-multichannel-session-bill");
    const c = await connectRt(wsUrl(stack.baseUrl, "sample_rate=16000&channels=2&multichannel=true"), { authorization: `Bearer ${own.key}` });
    const created = await c.next("session.created");
    expect(created.audio).toEqual({ format: "pcm_s16le", sample_rate: 16000, channels: 2, multichannel: true });
    await streamPcm(c, pcm, { speed: 2, chunkBytes: 1280 });
    await streamPcm(c, silence(1.5 * 2), { speed: 2, chunkBytes: 1280 }); // 1.5 s of stereo silence ends both channels' turns
    c.sendJson({ type: "session.close" });
    expect((await c.closed).code).toBe(1000);

    const committed = c.events.filter((e) => e.type === "input_audio_buffer.committed");
    const completed = c.events.filter((e) => e.type === `${T}.completed`);
    console.log(completed.map((e) => `ch${e.channel} ${e.item_id} ${e.audio_start_ms}-${e.audio_end_ms}: ${e.transcript}`).join("\n"));
    // every item event says its channel, and item ids are the channel's own
    for (const e of c.events.filter((x) => "item_id" in x)) {
      expect([0, 1]).toContain(e.channel);
      expect(e.item_id).toContain(`_ch${e.channel}_`);
    }
    expect(new Set(committed.map((e) => e.channel))).toEqual(new Set([0, 1]));
    expect(completed.length).toBe(committed.length);
    // every word carries its channel too, as segment and batch words do
    for (const e of completed) for (const w of e.words) expect(w.channel).toBe(e.channel);
    expect(completed.flatMap((e) => e.words).length).toBeGreaterThan(0);
    const said = (channel: number) => completed.filter((e) => e.channel === channel).map((e) => e.transcript.toLowerCase()).join(" ").split(/\W+/);
    expect(JFK_WORDS.some((w) => said(0).includes(w))).toBe(true);
    expect(LDC_WORDS.filter((w) => said(1).includes(w)).length).toBeGreaterThanOrEqual(2);
    expect(JFK_WORDS.some((w) => said(1).includes(w))).toBe(false);
    // channel 1's speech starts at the offset, on its own timeline
    const firstRight = c.events.find((e) => e.type === "input_audio_buffer.speech_started" && e.channel === 1);
    expect(firstRight.audio_start_ms).toBeGreaterThanOrEqual(STEREO_OFFSET_SECONDS * 1000 - 400);
    // billed per channel: (11 s + 1.5 s) × 2
    await waitFor(async () => ((await billed(own.id)) > 24.9 ? true : undefined), { timeoutMs: 20_000, what: "the session's usage" });
    expect(await billed(own.id)).toBeCloseTo(25, 0);
  });

  it("400 invalid_multichannel for a value other than true or false", async () => {
    await expect(connectRt(wsUrl(stack.baseUrl, "channels=2&multichannel=yes"), { authorization: `Bearer ${pro.key}` })).rejects.toMatchObject({ status: 400, body: { error: { code: "invalid_multichannel" } } });
  });
});

/** Audio seconds billed to a key so far (the usage projection's window). */
async function billed(keyId: string): Promise<number> {
  const row = await stack.db.selectFrom("usage_windows").select("audio_seconds").where("key_id", "=", keyId).executeTakeFirst();
  return Number(row?.audio_seconds ?? 0);
}

/** A PCM16 16 kHz WAV of `channels` silent channels, `seconds` long. */
function silentWav(channels: number, seconds: number): Uint8Array {
  const data = 16_000 * seconds * channels * 2;
  const b = Buffer.alloc(44 + data);
  b.write("RIFF", 0, "ascii");
  b.writeUInt32LE(36 + data, 4);
  b.write("WAVEfmt ", 8, "ascii");
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20);
  b.writeUInt16LE(channels, 22);
  b.writeUInt32LE(16_000, 24);
  b.writeUInt32LE(16_000 * channels * 2, 28);
  b.writeUInt16LE(channels * 2, 32);
  b.writeUInt16LE(16, 34);
  b.write("data", 36, "ascii");
  b.writeUInt32LE(data, 40);
  return b;
}

describe("a channel is heard as the same audio mono", () => {
  it("jfk.wav as channel 0 of a stereo upload whose other channel runs 0.9 s longer gives the same words as jfk.wav mono", async () => {
    const jfk = fixture("jfk.wav");
    const ldc = fixture("ldc93s1.wav");
    const offset = jfk.length - 2 * 16000;
    const frames = Math.max(jfk.length, offset + ldc.length);
    expect(frames - jfk.length).toBeGreaterThan(0.8 * 16000); // channel 0 is jfk.wav and then silence
    const stereo = new Int16Array(frames * 2);
    jfk.forEach((x, i) => (stereo[2 * i] = x));
    ldc.forEach((x, i) => (stereo[2 * (offset + i) + 1] = x));
    const header = Buffer.alloc(44);
    header.write("RIFF", 0, "ascii");
    header.writeUInt32LE(36 + stereo.byteLength, 4);
    header.write("WAVEfmt ", 8, "ascii");
    header.writeUInt32LE(16, 16);
    header.writeUInt16LE(1, 20);
    header.writeUInt16LE(2, 22);
    header.writeUInt32LE(16000, 24);
    header.writeUInt32LE(16000 * 4, 28);
    header.writeUInt16LE(4, 32);
    header.writeUInt16LE(16, 34);
    header.write("data", 36, "ascii");
    header.writeUInt32LE(stereo.byteLength, 40);
    const wav = Buffer.concat([header, Buffer.from(stereo.buffer)]);
    const channel = (await (await post(wav, { multichannel: "true", response_format: "verbose_json" })).json()) as VerboseTranscription;
    const mono = (await (await post(await readFile(fixturePath("jfk.wav")), { response_format: "verbose_json" })).json()) as VerboseTranscription;
    console.log(`channel 0: ${channel.channels![0]!.text}\nmono:      ${mono.text}`);
    expect(channel.channels![0]!.words.map((w) => w.word)).toEqual(mono.words.map((w) => w.word));
  });
});
