import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./support/stack";
import { connectRt, fixture, streamPcm, wsUrl, type RtClient } from "./support/realtime-support";
import { cut, finals, finish, isOutcome, lastEventId, outcomes, resume, speech } from "./support/resume";

/**
 * Resuming a session decoded while spoken (the default where the engine streams): the
 * connection is cut inside an utterance whose streamed decoder is open. The VAD keeps
 * it open, the resent audio continues it, and the client sees each item once with one
 * outcome whose deltas concatenate to its transcript. Streamed transcripts differ from
 * run to run even uninterrupted (the decoder's reads follow the audio's arrival), so the
 * items' timeline is what is compared with an uninterrupted run; the exact transcripts
 * are compared on the commit path (realtime-resume.test.ts).
 */
let stack: Stack;
let key: string;

beforeAll(async () => {
  stack = await startStack({ POCKETSPHINX_REAL_TIME_FACTOR: "6" });
  key = (await stack.issueKey("pro", "tenant-resume-streaming")).key;
});
afterAll(async () => {
  await stack?.stop();
});

const timeline = (events: any[]) => finals(events).map(({ start, end, outcomes }) => ({ start, end, outcomes }));

describe("resuming a streamed session", () => {
  it("a cut inside a streamed utterance: the same items as an uninterrupted run, each once, its deltas its transcript", async () => {
    const pcm = speech();
    const reference = await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` });
    expect((await reference.next("session.created")).input_audio_transcription.streaming).toBe(true);
    await streamPcm(reference, pcm, { speed: 4 });
    await outcomes(() => reference.events);
    await finish(reference);

    const connections: RtClient[] = [await connectRt(wsUrl(stack.baseUrl), { authorization: `Bearer ${key}` })];
    const created = await connections[0]!.next("session.created");
    const at = fixture("jfk.wav").length + 6 * 16000; // inside the second jfk's long utterance
    await streamPcm(connections[0]!, pcm.subarray(0, at), { speed: 4 });
    cut(connections[0]!);
    await connections[0]!.closed;
    await new Promise((r) => setTimeout(r, 1000));
    const second = await resume(stack.baseUrl, created.resume.credential, lastEventId(connections[0]!.events), key);
    connections.push(second);
    const resumed = await second.next("session.resumed");
    await streamPcm(second, pcm.subarray(resumed.audio_ms * 16), { speed: 4 });
    const all = () => connections.flatMap((c) => c.events);
    await outcomes(all);
    await finish(second);

    const events = all();
    const ids = events.filter((e) => typeof e.event_id === "string").map((e) => e.event_id);
    expect(new Set(ids).size, "no event twice").toBe(ids.length);
    expect(timeline(events)).toEqual(timeline(reference.events));
    for (const done of events.filter((e) => e.type === "conversation.item.input_audio_transcription.completed")) {
      const deltas = events.filter((e) => e.type.endsWith(".delta") && e.item_id === done.item_id);
      expect(deltas.map((d) => d.delta).join("")).toBe(done.transcript);
    }
    expect(events.filter(isOutcome).length).toBe(events.filter((e) => e.type === "input_audio_buffer.committed").length);
  }, 240_000);
});
