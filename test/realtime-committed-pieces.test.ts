import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeWav, pcm16MonoFromWav } from "../shared/audio/wav";
import { wordErrorRate } from "../shared/workers/wer";
import { concatPcm } from "./support/fixtures";
import { randomHex } from "./support/jobs-helpers";
import { connectRt, fixture, silence, streamPcm, wsUrl } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";

/**
 * Issue 44: a long committed realtime item (push-to-talk, `turn_detection: null`) is
 * decoded the way the segment plane decodes a clip of the same length. A "chapter" of
 * labelled speech, 43 s with 0.6 s pauses (five LibriVox sentences of Debian's
 * pocketsphinx-testdata, then jfk.wav and ldc93s1.wav), is committed once on a manual
 * session and uploaded to the segment plane: an item longer than `max_utterance_ms`
 * (at most 30 s) is cut at a pause (shared/audio/quiet-cut.ts), each item is cut into
 * pieces across the engines as a segment clip is, and the transcripts' word error rates
 * against the reference agree within 2 points.
 */
const DIR = "/usr/share/pocketsphinx/test/data/librivox";
const IDS = ["0870", "0880", "0890", "0920", "0930"].map((n) => `sense_and_sensibility_01_austen_64kb-${n}`);
const REFERENCE = (() => {
  const lines = readFileSync(`${DIR}/transcription`, "utf8").split("\n");
  const librivox = IDS.map((id) => lines.find((l) => l.includes(`(${id})`))!.replace(/<\/?s>|\(.*\)/g, "").trim());
  return [...librivox, "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.", "She had your dark suit in greasy wash water all year."].join(" ");
})();
const CHAPTER = (() => {
  const clips = [...IDS.map((id) => pcm16MonoFromWav(readFileSync(`${DIR}/${id}.wav`))!), fixture("jfk.wav"), fixture("ldc93s1.wav")];
  return concatPcm(...clips.flatMap((pcm) => [pcm, silence(0.6)]));
})();

let stack: Stack;
let key: string;

beforeAll(async () => {
  stack = await startStack({ POCKETSPHINX_PROCESSES: "2", RT_STREAM_DECODERS: "0" });
  key = (await stack.issueKey("pro", `committed-${randomHex()}`)).key;
}, 120_000);
afterAll(async () => {
  await stack?.stop();
});

describe("a long committed item is decoded like a segment clip", () => {
  it("a 43 s chapter committed once: items cut at a pause, decoded in pieces, word error rate within 2 points of the segment plane's on the same audio", { timeout: 180_000 }, async () => {
    const form = new FormData();
    form.set("file", new Blob([new Uint8Array(encodeWav(CHAPTER, 16000))]), "chapter.wav");
    form.set("response_format", "json");
    const res = await stack.fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: { authorization: `Bearer ${key}` } });
    expect(res.status).toBe(200);
    expect(Number(res.headers.get("x-segment-pieces"))).toBeGreaterThan(1);
    const segment = ((await res.json()) as { text: string }).text;

    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    await c.next("session.created");
    c.sendJson({ type: "session.update", session: { turn_detection: { type: "manual", max_utterance_ms: 30000 } } });
    await c.next("session.updated");
    await streamPcm(c, CHAPTER, { speed: 8, chunkBytes: 6400 });
    c.sendJson({ type: "input_audio_buffer.commit" });
    // an item per max_utterance_ms at most (30 s): two here, each with its outcome
    const deadline = Date.now() + 150_000;
    const done = () => c.events.filter((e) => e.type === "conversation.item.input_audio_transcription.completed");
    while (done().length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    const items = c.events.filter((e) => e.type === "input_audio_buffer.committed");
    expect(items).toHaveLength(2);
    const completed = items.map((i) => done().find((e) => e.item_id === i.item_id)!);
    const transcript = completed.map((e) => e.transcript).join(" ");
    const committed = wordErrorRate(REFERENCE, transcript);
    const whole = wordErrorRate(REFERENCE, segment);
    console.log(`segment plane: WER ${whole.wer.toFixed(3)} (${whole.errors}/${whole.referenceWords}): ${segment}\ncommitted once (items cut at ${completed[0]!.audio_end_ms} ms): WER ${committed.wer.toFixed(3)} (${committed.errors}/${committed.referenceWords}): ${transcript}`);
    expect(Math.abs(committed.wer - whole.wer)).toBeLessThanOrEqual(0.02);
    // the cut fell in a pause: the audio around it is silence
    const cutAt = Math.round((completed[0]!.audio_end_ms - completed[0]!.audio_start_ms) * 16);
    expect(CHAPTER.subarray(cutAt - 800, cutAt + 800).every((x) => x === 0)).toBe(true);
    // the items' words sit on the session timeline, in order, inside their items
    for (const e of completed) {
      const starts = e.words.map((w: { start_ms: number }) => w.start_ms);
      expect([...starts].sort((a, b) => a - b)).toEqual(starts);
      expect(e.words.at(-1).end_ms).toBeLessThanOrEqual(e.audio_end_ms);
    }
    c.sendJson({ type: "session.close" });
  });
});
