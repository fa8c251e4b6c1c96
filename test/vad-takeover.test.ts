import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openPartitionConsumer } from "../services/vad/vad-consumer";
import { isolatedNats } from "./support/nats";

/**
 * A partition changing owner on the real nats-server: whatever the previous owner was
 * handed but never acked must come to the new owner first and in order, not after the
 * ack wait and behind newer audio (where a cumulative ack would drop it).
 */
let nats: Awaited<ReturnType<typeof isolatedNats>>;
beforeAll(async () => {
  nats = await isolatedNats();
});
afterAll(async () => {
  await nats?.destroy();
});

const stream = () => nats.topology.streams.rtAudio.name;
const subject = (n: number) => nats.topology.subjects.rtAudio(0, `sess_${n}`);

async function take(count: number) {
  const consumer = await nats.js.consumers.get(stream(), "vad_p0");
  const batch = await consumer.fetch({ max_messages: count, expires: 2000 });
  const got = [];
  for await (const m of batch) got.push(m);
  return got;
}

describe("VAD partition takeover", () => {
  it("replays from after the ack floor, in order, when the last owner left messages unacked", async () => {
    await openPartitionConsumer(nats, stream(), "vad_p0", nats.topology.subjects.rtAudioPartition(0));
    for (let i = 1; i <= 10; i++) await nats.js.publish(subject(i), "a");
    // the old owner: handled 1..4 and acked 4 (cumulative), was handed 5..8, died
    const firstOwner = await take(8);
    expect(firstOwner.map((m) => m.subject)).toEqual([1, 2, 3, 4, 5, 6, 7, 8].map(subject));
    await firstOwner[3].ackAck();
    await openPartitionConsumer(nats, stream(), "vad_p0", nats.topology.subjects.rtAudioPartition(0));
    const next = await take(6);
    expect(next.map((m) => m.subject)).toEqual([5, 6, 7, 8, 9, 10].map(subject));
    await next[5].ackAck();
  });

  it("replays from the durable's start when the last owner never acked at all", async () => {
    await nats.jsm.consumers.delete(stream(), "vad_p0");
    await openPartitionConsumer(nats, stream(), "vad_p0", nats.topology.subjects.rtAudioPartition(0));
    for (let i = 11; i <= 13; i++) await nats.js.publish(subject(i), "a");
    expect((await take(3)).map((m) => m.subject)).toEqual([11, 12, 13].map(subject));
    await openPartitionConsumer(nats, stream(), "vad_p0", nats.topology.subjects.rtAudioPartition(0));
    const replayed = await take(3);
    expect(replayed.map((m) => m.subject)).toEqual([11, 12, 13].map(subject));
    await replayed[2].ackAck();
  });

  it("keeps the durable as it is when nothing is pending", async () => {
    const before = await nats.jsm.consumers.info(stream(), "vad_p0");
    expect(before.num_ack_pending).toBe(0);
    await openPartitionConsumer(nats, stream(), "vad_p0", nats.topology.subjects.rtAudioPartition(0));
    const after = await nats.jsm.consumers.info(stream(), "vad_p0");
    expect(after.created).toBe(before.created);
    await nats.js.publish(subject(14), "a");
    expect((await take(1)).map((m) => m.subject)).toEqual([subject(14)]);
  });
});
