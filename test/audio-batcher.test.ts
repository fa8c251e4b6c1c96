import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeAudioBatch, type AudioBatchEntry } from "../schemas/audio-batch";
import { createAudioBatcher } from "../services/realtime-gateway/audio-publisher";
import { isolatedNats } from "./support/nats";

/**
 * The gateway's audio batcher on the real nats-server: frames are written straight into
 * their partition's batch (services/realtime-gateway/audio-publisher.ts), so what lands
 * in RT_AUDIO must be every session's audio and controls, in order per session, with
 * runs cut at 64 KB and batches at their size bound.
 */
let nats: Awaited<ReturnType<typeof isolatedNats>>;

beforeAll(async () => {
  nats = await isolatedNats();
});

afterAll(async () => {
  await nats?.destroy();
});

function samples(n: number, seed: number): Int16Array {
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) out[i] = ((i * 31 + seed * 7919) % 65536) - 32768;
  return out;
}

async function readBatches(subject: string, count: number): Promise<{ bytes: number; entries: AudioBatchEntry[] }[]> {
  const stream = nats.topology.streams.rtAudio.name;
  const durable = `read_${Math.random().toString(36).slice(2, 8)}`;
  await nats.jsm.consumers.add(stream, { durable_name: durable, filter_subject: subject });
  const consumer = await nats.js.consumers.get(stream, durable);
  const out: { bytes: number; entries: AudioBatchEntry[] }[] = [];
  const messages = await consumer.consume({ max_bytes: 8 * 1024 * 1024 });
  for await (const m of messages) {
    out.push({ bytes: m.data.byteLength, entries: decodeAudioBatch(m.data).map((e) => ({ ...e, payload: e.payload.slice() })) });
    m.ack();
    if (out.length === count) break;
  }
  await messages.close();
  return out;
}

describe("audio batcher", () => {
  it("carries two sessions' frames and controls in order, cuts a 1 MiB frame into 64 KB runs and batches at their bound", async () => {
    const subject = nats.topology.subjects.rtAudio(0, "gw-test");
    const failures: unknown[] = [];
    const batcher = createAudioBatcher({ js: nats.js, subject: () => subject, instanceId: "gw-test", maxPendingAcks: 64, intervalMs: 60_000, maxBatchBytes: 256 * 1024 });
    const a = batcher.session({ sessionId: "sess_a", partition: 0, onFailure: (e) => failures.push(e) });
    const b = batcher.session({ sessionId: "sess_b", partition: 0, onFailure: (e) => failures.push(e) });
    const sentA: Int16Array[] = [];
    const sentB: Int16Array[] = [];
    // consecutive frames of one session extend its run: one entry
    for (const seed of [50, 51]) {
      a.pushAudio(samples(100, seed));
      sentA.push(samples(100, seed));
    }
    a.control({ kind: "commit", event_id: "one" });
    for (let i = 0; i < 5; i++) {
      // the caller may reuse its buffer once pushAudio returns: the batcher copied it
      const frame = samples(640, i);
      a.pushAudio(frame);
      sentA.push(frame.slice());
      frame.fill(0);
      const other = samples(320, 100 + i);
      b.pushAudio(other);
      sentB.push(other);
    }
    const big = samples(512 * 1024, 7); // a 1 MiB frame
    a.pushAudio(big);
    sentA.push(big);
    a.control({ kind: "clear", event_id: "two" });
    a.pushAudio(samples(160, 9));
    sentA.push(samples(160, 9));
    await a.settled();
    await b.settled();
    await batcher.stop();
    expect(failures).toEqual([]);

    const stream = await nats.jsm.streams.info(nats.topology.streams.rtAudio.name);
    const batches = await readBatches(subject, stream.state.messages);
    expect(batches.length).toBeGreaterThanOrEqual(4); // 1 MiB + 20 KB over 256 KB batches
    for (const batch of batches) {
      expect(batch.bytes).toBeLessThanOrEqual(256 * 1024 + 64 * 1024);
      for (const e of batch.entries) expect(e.payload.byteLength).toBeLessThanOrEqual(64 * 1024);
    }
    const entries = batches.flatMap((x) => x.entries);
    const of = (id: string) => entries.filter((e) => e.sessionId === id);
    // per session: seq counts up from 0, offsets follow the audio, controls where they were sent
    for (const id of ["sess_a", "sess_b"]) {
      const own = of(id);
      expect(own.map((e) => e.seq)).toEqual(own.map((_, i) => i));
      let position = 0;
      for (const e of own) {
        expect(e.offset).toBe(position);
        if (e.kind === "audio") position += e.payload.byteLength / 2;
      }
    }
    expect(of("sess_a").map((e) => (e.kind === "control" ? JSON.parse(new TextDecoder().decode(e.payload)).kind : "audio")).filter((k, i, all) => k !== "audio" || all[i - 1] !== "audio")).toEqual(["audio", "commit", "audio", "clear", "audio"]);
    expect(of("sess_a")[0]!.payload.byteLength).toBe(400);
    expect(of("sess_a")[1]!.offset).toBe(200);
    const audioOf = (id: string) => Buffer.concat(of(id).filter((e) => e.kind === "audio").map((e) => e.payload));
    expect(audioOf("sess_a").equals(Buffer.concat(sentA.map((x) => Buffer.from(x.buffer, x.byteOffset, x.byteLength))))).toBe(true);
    expect(audioOf("sess_b").equals(Buffer.concat(sentB.map((x) => Buffer.from(x.buffer, x.byteOffset, x.byteLength))))).toBe(true);
    expect(a.messagesPublished).toBe(of("sess_a").length);
  });
});
