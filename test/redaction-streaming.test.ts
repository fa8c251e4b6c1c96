import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serverEvent } from "../schemas/realtime";
import { decodeAudio } from "../shared/audio/decode";
import { synthesise } from "./support/espeak";
import { randomHex } from "./support/jobs-helpers";
import { connectRt, silence, streamPcm, wsUrl } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";

/**
 * Issue 27, streaming: with `redact` set, no delta carries what the final redacts. Speech
 * with a card number and a phone number (espeak-ng) is streamed in real time to the
 * embedded PocketSphinx stream decoders; the deltas, concatenated, are the completed
 * transcript (append-only), so an entity the final redacts never went out raw; and no
 * delta holds any two spoken digits in a row that the completed item shows as a label.
 * Then the same with real recordings under `redact: ["numbers"]`: TIDIGITS' "two nine
 * three four zero" (dhd.2934z.raw) and numbers.raw ("three three four six nine eight
 * two"), from Debian's pocketsphinx-testdata.
 */
const T = "conversation.item.input_audio_transcription";
const DIGIT = /\b(zero|oh|one|two|three|four|five|six|seven|eight|nine)\b/g;
let stack: Stack;
let key: string;

beforeAll(async () => {
  stack = await startStack({ RT_STREAM_DECODERS: "2" });
  key = (await stack.issueKey("pro", `rs-${randomHex()}`)).key;
}, 120_000);
afterAll(async () => {
  await stack?.stop();
});

describe("streamed deltas under redaction", () => {
  it("never carry a digit run the final redacts; they add up to the completed transcript", { timeout: 240_000 }, async () => {
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    expect((await c.next("session.created")).input_audio_transcription.streaming).toBe(true);
    c.sendJson({ type: "session.update", session: { input_audio_transcription: { redact: ["pci", "phone"], interim_results: true, partial_interval_ms: 200 } } });
    expect((await c.next("session.updated")).session.input_audio_transcription).toMatchObject({ redact: ["pci", "phone"] });
    const speech = (await decodeAudio(await synthesise("my card number is four one one one one one one one one one one one one one one one and my phone is five five five one two three four thank you", { wordsPerMinute: 140 }))).pcm;
    await streamPcm(c, silence(0.3), { speed: 1, chunkBytes: 640 });
    await streamPcm(c, speech, { speed: 1, chunkBytes: 640 });
    await streamPcm(c, silence(1.2), { speed: 1, chunkBytes: 640 });
    const completed = await c.next(`${T}.completed`, 180_000);
    for (const e of c.events) expect(serverEvent.safeParse(e).success, JSON.stringify(e)).toBe(true);
    const deltas = c.events.filter((e) => e.type === `${T}.delta` && e.item_id === completed.item_id);
    console.log(`completed: ${completed.transcript}\ndeltas: ${JSON.stringify(deltas.map((d) => d.delta))}`);
    expect(c.events.some((e) => e.type === `${T}.interim`)).toBe(false); // interims are off under redaction
    expect(deltas.map((d) => d.delta).join("")).toBe(completed.transcript);
    const labelled = completed.words.filter((w: { entity?: string }) => w.entity);
    for (const w of labelled) expect(w.word).toMatch(/^\[[A-Z_]+\]$/);
    // where the final redacted, no delta said the words
    if (labelled.length) for (const d of deltas) expect((d.delta.toLowerCase().match(DIGIT) ?? []).length, d.delta).toBeLessThan(2);
    c.sendJson({ type: "session.close" });
  });

  // real recordings (Debian's pocketsphinx-testdata, 16 kHz 16-bit mono raw)
  it.each(["tidigits/dhd.2934z.raw", "numbers.raw"])("never carry the digit run of a real recording that the final redacts (%s, redact=numbers)", { timeout: 120_000 }, async (file) => {
    const raw = readFileSync(`/usr/share/pocketsphinx/test/data/${file}`);
    const speech = new Int16Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
    const c = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    await c.next("session.created");
    c.sendJson({ type: "session.update", session: { input_audio_transcription: { redact: ["numbers"], partial_interval_ms: 200 } } });
    expect((await c.next("session.updated")).session.input_audio_transcription).toMatchObject({ redact: ["numbers"] });
    await streamPcm(c, silence(0.3), { speed: 1, chunkBytes: 640 });
    await streamPcm(c, speech, { speed: 1, chunkBytes: 640 });
    await streamPcm(c, silence(1.2), { speed: 1, chunkBytes: 640 });
    const completed = await c.next(`${T}.completed`, 60_000);
    const deltas = c.events.filter((e) => e.type === `${T}.delta` && e.item_id === completed.item_id);
    console.log(`completed: ${completed.transcript}\ndeltas: ${JSON.stringify(deltas.map((d) => d.delta))}`);
    expect(deltas.map((d) => d.delta).join("")).toBe(completed.transcript);
    // the stream decoder hears digit runs, which the final redacts
    expect(completed.transcript).toContain("[NUMBER]");
    for (const d of deltas) expect((d.delta.toLowerCase().match(DIGIT) ?? []).length, d.delta).toBeLessThan(2);
    expect(completed.transcript.toLowerCase().match(DIGIT) ?? []).toHaveLength(0);
    c.sendJson({ type: "session.close" });
  });
});
